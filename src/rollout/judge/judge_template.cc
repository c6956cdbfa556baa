#include "flywheel/rollout/judge/judge_template.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"

namespace flywheel::rollout {
namespace {

bool name_char(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

}  // namespace

absl::StatusOr<JudgeTemplate> JudgeTemplate::parse(const std::string& text) {
  JudgeTemplate t;
  std::string literal;
  auto flush = [&] {
    if (!literal.empty()) t.pieces_.push_back({false, std::move(literal)});
    literal.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool doubled = i + 1 < text.size() && text[i + 1] == c;
    if (c == '}') {
      if (!doubled) {
        return absl::InvalidArgumentError(absl::StrCat(
            "template: '}' at offset ", i, " closes no field (write }} for a literal brace)"));
      }
      literal.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      literal.push_back(c);
      continue;
    }
    if (doubled) {
      literal.push_back('{');
      ++i;
      continue;
    }
    const size_t close = text.find('}', i + 1);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template: '{' at offset ", i, " is not closed (write {{ for a literal brace)"));
    }
    const std::string name = text.substr(i + 1, close - i - 1);
    bool valid = !name.empty();
    for (char n : name) valid = valid && name_char(n);
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template: the field at offset ", i, " is '{", name,
          "}'; a field is {prompt}, {completion} or a record key of letters, digits, '_', '-' "
          "and '.' (write {{ and }} for literal braces)"));
    }
    flush();
    t.pieces_.push_back({true, name});
    i = close;
  }
  flush();
  return t;
}

absl::StatusOr<std::string> JudgeTemplate::render(const rewards::RewardInput& input) const {
  std::string out;
  for (const Piece& p : pieces_) {
    if (!p.field) {
      out += core::utf8_lossy(p.text);
      continue;
    }
    if (p.text == "completion") {
      out += core::utf8_lossy(input.completion);
      continue;
    }
    const core::Json* value = input.record ? input.record->find(p.text) : nullptr;
    if (p.text == "prompt" && (value == nullptr || !value->is_string())) {
      out += core::utf8_lossy(input.prompt);
      continue;
    }
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(input.record_name,
                                                     ": reward 'llm_judge': the template's field {",
                                                     p.text, "} is not a key of the record"));
    }
    if (value->is_string()) {
      out += core::utf8_lossy(value->as_string());
    } else if (value->is_number() || value->is_bool()) {
      out += value->dump();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(input.record_name, ": reward 'llm_judge': the record's \"", p.text,
                       "\" is an object, a list or null; the template's {", p.text,
                       "} takes a string, a number or a boolean"));
    }
  }
  return out;
}

std::vector<std::string> JudgeTemplate::fields() const {
  std::vector<std::string> out;
  for (const Piece& p : pieces_) {
    if (p.field) out.push_back(p.text);
  }
  return out;
}

}  // namespace flywheel::rollout
