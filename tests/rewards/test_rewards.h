// Reward functions for pool and composite tests: constant, failing, sleeping, counting.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards::testing {

// Scores the completion's length; "error" fails; "hang" sleeps `hang_s`; counts calls.
class ScriptedReward : public RewardFunction {
 public:
  explicit ScriptedReward(double hang_s = 3600, bool batched = false)
      : hang_s_(hang_s), batched_(batched) {}
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    calls_.fetch_add(1);
    if (input.completion == "error") return absl::InvalidArgumentError("scripted error");
    if (input.completion == "throw") throw std::runtime_error("scripted exception");
    if (input.completion == "hang") {
      std::this_thread::sleep_for(std::chrono::duration<double>(hang_s_));
    }
    RewardOutput out;
    out.score = static_cast<double>(input.completion.size());
    out.components["half"] = out.score / 2;
    return out;
  }
  std::vector<absl::StatusOr<RewardOutput>> score_batch(
      const std::vector<RewardInput>& inputs) const override {
    batch_calls_.fetch_add(1);
    return RewardFunction::score_batch(inputs);
  }
  bool batched() const override { return batched_; }

  mutable std::atomic<int64_t> calls_{0};
  mutable std::atomic<int64_t> batch_calls_{0};

 private:
  double hang_s_;
  bool batched_;
};

}  // namespace flywheel::rewards::testing
