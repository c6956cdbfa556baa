// How the `llm_judge` reward reads a verdict from its judge (`params.verdict`):
//
//   yes_prob  no generation: the judge's next-token distribution after its prompt, read at the
//             first tokens of `yes` and `no`: score = P(yes) / (P(yes) + P(no)).
//   label     the judge's greedy output holds labels mapped to scores ("yes=1, no=0"): the last
//             label in it that stands as a word (case-insensitive) is the verdict, so that a
//             judge may reason first and conclude last.
//   score     the judge's greedy output holds a number in [score_min, score_max]: the last
//             number in it is the verdict (of "8/10", the 8), scored (x - score_min) / (score_max -
//             score_min).
//
// A verdict that cannot be read is an error, which the scoring pool turns into the fallback
// score and counts.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::rollout {

using JudgeLabels = std::vector<std::pair<std::string, double>>;

// "yes=1, no=0" -> {{"yes", 1}, {"no", 0}}. InvalidArgument naming the entry for an empty
// label, a label with a space or '=' in it, a value that is not a finite number, a label given
// twice (ignoring case), or fewer than two labels.
absl::StatusOr<JudgeLabels> parse_judge_labels(absl::string_view spec);

// The value of the last label of `labels` in `output` that stands as a word: not preceded or
// followed by a letter or digit; matched ignoring ASCII case. InvalidArgument quoting the
// output (its end, when long) when it holds none.
absl::StatusOr<double> label_verdict(absl::string_view output, const JudgeLabels& labels);

// The last number in `output` ("7", "-2", "8.5"; a rating "9/10" reads 9): InvalidArgument
// quoting the output when it holds none, and naming the range when the number is outside
// [low, high]. Returns the number itself (the caller scales it).
absl::StatusOr<double> score_verdict(absl::string_view output, double low, double high);

// P(yes) / (P(yes) + P(no)) from the two log-probabilities, without overflow or underflow.
double yes_probability(double logprob_yes, double logprob_no);

}  // namespace flywheel::rollout
