#include "flywheel/model/tokenizer/step_tokens.h"

#include "absl/strings/str_cat.h"

namespace flywheel::model {

absl::StatusOr<StepTokens> encode_steps(const Tokenizer& tokenizer, absl::string_view prompt,
                                        const std::vector<std::string>& steps,
                                        absl::string_view separator) {
  StepTokens out;
  absl::StatusOr<std::vector<int64_t>> p = tokenizer.encode(prompt);
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("prompt: ", p.status().message()));
  out.ids = std::move(*p);
  out.prompt_tokens = static_cast<int64_t>(out.ids.size());
  EncodeOptions plain;
  plain.add_special_tokens = false;
  for (size_t k = 0; k < steps.size(); ++k) {
    absl::StatusOr<std::vector<int64_t>> s =
        tokenizer.encode(absl::StrCat(steps[k], separator), plain);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", k, ": ", s.status().message()));
    }
    if (s->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", k, " is empty (no token to read its label at)"));
    }
    out.ids.insert(out.ids.end(), s->begin(), s->end());
    out.step_ends.push_back(static_cast<int64_t>(out.ids.size()));
  }
  return out;
}

std::vector<TextStep> split_steps(absl::string_view completion, absl::string_view separator) {
  std::vector<TextStep> steps;
  size_t begin = 0;
  while (begin < completion.size()) {
    const size_t at =
        separator.empty() ? absl::string_view::npos : completion.find(separator, begin);
    const size_t text_end = at == absl::string_view::npos ? completion.size() : at;
    const size_t end = at == absl::string_view::npos ? completion.size() : at + separator.size();
    if (text_end > begin) {
      steps.push_back({std::string(completion.substr(begin, text_end - begin)), end});
    } else if (!steps.empty()) {
      steps.back().end = end;
    }
    begin = end;
  }
  return steps;
}

}  // namespace flywheel::model
