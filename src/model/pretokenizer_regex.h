// The Split pre-tokenizer's regular expression, with Oniguruma's meaning, run by PCRE2.
//
// Hugging Face compiles these patterns with Oniguruma. The patterns of Qwen2/Qwen3/Llama 3/GPT-2
// use \p{L}, \p{N}, \s, lookahead and (?i:...), which PCRE2 (UTF + UCP) supports with one
// difference: PCRE2's \s also matches U+180E. \s and \S are therefore rewritten to Oniguruma's
// set: [\t\n\v\f\r\x{85}\p{Z}].
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::model {

class PretokenizerRegex {
 public:
  // InvalidArgument (with PCRE2's message and offset) for a pattern PCRE2 cannot compile.
  static absl::StatusOr<std::unique_ptr<PretokenizerRegex>> compile(const std::string& pattern);
  ~PretokenizerRegex();

  // Calls on_match(begin, end) with the [begin, end) byte range of each successive
  // non-overlapping match in `text`, in time linear in its length (for patterns that do not
  // backtrack), and stops at the first error on_match returns. InvalidArgument when `text` is
  // not UTF-8.
  absl::Status for_each_match(absl::string_view text,
                              absl::FunctionRef<absl::Status(size_t, size_t)> on_match) const;
  // The ranges for_each_match() visits.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> find_all(absl::string_view text) const;

  // The pattern after \s / \S rewriting (exposed for tests).
  static std::string translate(absl::string_view pattern);

 private:
  PretokenizerRegex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::model
