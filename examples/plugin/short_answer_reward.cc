#include "short_answer_reward.h"

#include "flywheel/rewards/param_reader.h"

namespace flywheel_example {

absl::StatusOr<std::unique_ptr<flywheel::rewards::RewardFunction>> ShortAnswerReward::create(
    const flywheel::rewards::RewardSpec& spec) {
  flywheel::rewards::ParamReader r(spec);
  const int64_t max_chars = r.integer("max_chars", 200, 1, int64_t{1} << 30);
  if (absl::Status s = r.finish(); !s.ok()) return s;  // an unknown option is an error
  return std::unique_ptr<flywheel::rewards::RewardFunction>(new ShortAnswerReward(max_chars));
}

absl::StatusOr<flywheel::rewards::RewardOutput> ShortAnswerReward::score(
    const flywheel::rewards::RewardInput& input) const {
  flywheel::rewards::RewardOutput out;
  out.score = static_cast<int64_t>(input.completion.size()) <= max_chars_ ? 1.0 : 0.0;
  out.components["chars"] = static_cast<double>(input.completion.size());
  return out;
}

}  // namespace flywheel_example
