// An example reward: 1 when the completion has at most `max_chars` characters, else 0.
#pragma once

#include <cstdint>
#include <memory>

#include "flywheel/rewards/reward_function.h"

namespace flywheel_example {

class ShortAnswerReward : public flywheel::rewards::RewardFunction {
 public:
  static absl::StatusOr<std::unique_ptr<flywheel::rewards::RewardFunction>> create(
      const flywheel::rewards::RewardSpec& spec);

  absl::StatusOr<flywheel::rewards::RewardOutput> score(
      const flywheel::rewards::RewardInput& input) const override;

 private:
  explicit ShortAnswerReward(int64_t max_chars) : max_chars_(max_chars) {}
  int64_t max_chars_;
};

}  // namespace flywheel_example
