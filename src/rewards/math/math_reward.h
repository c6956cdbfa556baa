// The `math` reward: 1 when the final answer of a completion equals the record's reference
// answer (see answer_extraction.h, math_normalize.h, math_equivalence.h), else 0.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards::math {

struct MathRewardOptions {
  std::string answer_key = "answer";  // record key of the reference (string, number or list)
  // Relative, in [0, 1], wherever an irrational value is compared (see MathNumber::equal): two
  // closed forms (\frac{\sqrt2}{2} vs \frac{1}{\sqrt2}), or a decimal written with enough
  // digits (1.4142135624 vs \sqrt{2}). Rationals always compare exactly.
  double tolerance = 1e-9;
  bool fallback_to_last_number = false;  // no boxed / #### / "answer is": take the last number
  double correct_score = 1.0;
  double wrong_score = 0.0;
};

// Components: `format` (1 when an answer was found in the completion) and `correct` (1 or 0).
// A record without `answer_key` is an error naming the record and the key; a reference that is
// a list accepts any of its items. Immutable after create(); score() is thread-safe.
class MathReward : public RewardFunction {
 public:
  // Reads the options from spec.params (strict: an unknown option is an error).
  static absl::StatusOr<std::unique_ptr<MathReward>> create(const RewardSpec& spec);
  explicit MathReward(MathRewardOptions options) : options_(std::move(options)) {}

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override;

  const MathRewardOptions& options() const { return options_; }

 private:
  MathRewardOptions options_;
};

}  // namespace flywheel::rewards::math
