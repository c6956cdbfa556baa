// The Split pre-tokenizer's regular expression, with Oniguruma's meaning, run by PCRE2.
//
// Hugging Face compiles these patterns with Oniguruma. The patterns of Qwen2/Qwen3/Llama 3/GPT-2
// use \p{L}, \p{N}, \s, lookahead and (?i:...), which PCRE2 (UTF + UCP) supports with one
// difference: PCRE2's \s also matches U+180E. \s and \S are therefore rewritten to Oniguruma's
// set: [\t\n\v\f\r\x{85}\p{Z}].
//
// Matching a text has a work budget linear in its length. PCRE2's match limit cannot provide
// one: it counts backtracking steps per start position, not the scanning inside a possessive
// repeat or a lookahead, so `a(?=a*b)|a` costs O(n) per match, O(n^2) per text, under any match
// limit. The pattern is compiled with auto-callouts instead: each pattern item the matcher
// reaches costs one step plus the number of bytes the match position moved since the previous
// item, and matching stops with an error once the text's budget is spent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::model {

// The work budget of matching a text of n bytes:
//   base_work + (n + 1) * (work_per_byte + work_per_item * items)
// steps, where `items` is the number of items in the pattern (45 in Qwen3's). The Qwen3,
// Llama 3 and GPT-2 patterns take at most 24 steps per byte on any text (long runs of one
// character class, one-byte pre-tokens, CJK, emoji, mixed text), against ~300 allowed.
struct PretokenizerRegexOptions {
  int64_t base_work = int64_t{1} << 16;
  int64_t work_per_byte = 128;
  int64_t work_per_item = 4;
};

class PretokenizerRegex {
 public:
  using Options = PretokenizerRegexOptions;

  // What matching one text did.
  struct Stats {
    int64_t calls = 0;   // pcre2_match calls
    int64_t work = 0;    // steps taken
    int64_t budget = 0;  // steps allowed for this text
  };

  // InvalidArgument (with PCRE2's message and offset) for a pattern PCRE2 cannot compile.
  static absl::StatusOr<std::unique_ptr<PretokenizerRegex>> compile(const std::string& pattern,
                                                                    const Options& options = {});
  ~PretokenizerRegex();

  // Calls on_match(begin, end) with the [begin, end) byte range of each successive
  // non-overlapping match in `text`, and stops at the first error on_match returns.
  // InvalidArgument when `text` is not UTF-8; ResourceExhausted naming the pattern and the
  // budget when matching `text` takes more than budget(text.size()) steps (the work done is at
  // most that plus text.size()). Thread-safe.
  absl::Status for_each_match(absl::string_view text,
                              absl::FunctionRef<absl::Status(size_t, size_t)> on_match,
                              Stats* stats = nullptr) const;
  // The ranges for_each_match() visits.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> find_all(absl::string_view text,
                                                                  Stats* stats = nullptr) const;

  // Steps allowed for a text of `bytes` bytes.
  int64_t budget(size_t bytes) const;

  // The pattern after \s / \S rewriting (exposed for tests).
  static std::string translate(absl::string_view pattern);

 private:
  PretokenizerRegex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::model
