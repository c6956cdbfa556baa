#include "pretokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"

namespace flywheel::model {
namespace {

constexpr absl::string_view kSpaceSet = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";

}  // namespace

struct PretokenizerRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PretokenizerRegex::~PretokenizerRegex() = default;

std::string PretokenizerRegex::translate(absl::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", kSpaceSet, in_class ? "" : "]");
      } else if (e == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kSpaceSet, "]");
      } else {
        // \S inside a class has no simple rewrite; these patterns never use it, PCRE2 keeps it.
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' or '^]' right after '[' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PretokenizerRegex>> PretokenizerRegex::compile(
    const std::string& pattern) {
  std::string translated = translate(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("cannot compile pre-tokenizer regex '", pattern,
                                                   "': ", reinterpret_cast<char*>(message),
                                                   " at offset ", error_offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  std::unique_ptr<PretokenizerRegex> regex(new PretokenizerRegex());
  regex->impl_ = std::make_unique<Impl>();
  regex->impl_->code = code;
  return regex;
}

absl::Status PretokenizerRegex::for_each_match(
    absl::string_view text, absl::FunctionRef<absl::Status(size_t, size_t)> on_match) const {
  // Checked once here: without PCRE2_NO_UTF_CHECK, PCRE2 re-checks the rest of the text on every
  // call, which made a text of n bytes cost O(n^2).
  if (!core::is_valid_utf8(text)) {
    return absl::InvalidArgumentError("pre-tokenizer input is not valid UTF-8");
  }
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  size_t start = 0;
  absl::Status status;
  while (start <= text.size()) {
    int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                         PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      status = absl::InvalidArgumentError(
          absl::StrCat("pre-tokenizer regex failed: ", reinterpret_cast<char*>(message)));
      break;
    }
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // empty match: step over one character
      if (begin >= text.size()) break;
      size_t step = 1;
      while (begin + step < text.size() &&
             (static_cast<unsigned char>(text[begin + step]) & 0xC0) == 0x80) {
        ++step;
      }
      start = begin + step;
      continue;
    }
    status = on_match(begin, end);
    if (!status.ok()) break;
    start = end;
  }
  pcre2_match_data_free(data);
  return status;
}

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> PretokenizerRegex::find_all(
    absl::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  absl::Status status = for_each_match(text, [&](size_t begin, size_t end) {
    matches.emplace_back(begin, end);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return matches;
}

}  // namespace flywheel::model
