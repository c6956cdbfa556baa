// The configured reward: a weighted sum of reward functions (`rewards.functions`), with each
// function's score and components kept for metrics. A function that fails or times out on a
// sample contributes the fallback score instead (rewards.fallback_score) and is counted.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/options/rewards_options.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards {

struct WeightedReward {
  std::string label;  // metric prefix: the function's name, or its `label` when set
  double weight = 1.0;
  std::shared_ptr<const RewardFunction> function;
};

// One sample's result.
struct ScoredSample {
  double reward = 0;  // sum of weight x score (fallback for failed parts)
  // "<label>": a part's score; "<label>/<component>": its components; for a judge,
  // "<label>/agreement/<other>": 1 when it and another function both pass or both fail.
  std::map<std::string, double> parts;
  std::vector<std::string> errors;  // "<label>: message", including timeouts
  int64_t timeouts = 0;
  // Process rewards of the parts that gave them, times their weights (part of `reward`); ends
  // increasing, rewards at one end summed. See RewardOutput.
  std::vector<int32_t> step_ends;
  std::vector<double> step_rewards;
};

// The outcome of one function on one sample, as the pool collects it.
struct PartResult {
  absl::StatusOr<RewardOutput> output = absl::UnknownError("not scored");
  bool timed_out = false;
};

class CompositeReward {
 public:
  // A judge's verdict, and another function's score, at or above this count as a pass when
  // their agreement is reported ("<judge>/agreement/<other>").
  static constexpr double kPass = 0.5;

  CompositeReward(std::vector<WeightedReward> parts, double fallback_score)
      : parts_(std::move(parts)), fallback_score_(fallback_score) {}

  // Builds every function of `options` from the `reward` registry of `registry`; errors name the
  // function (`rewards.functions[i] (math): ...`).
  static absl::StatusOr<std::shared_ptr<const CompositeReward>> create(
      const core::RewardsOptions& options, core::PluginRegistry& registry, int64_t max_new_tokens,
      const std::string& config_dir);

  const std::vector<WeightedReward>& parts() const { return parts_; }
  double fallback_score() const { return fallback_score_; }

  // Combines one result per part (in parts() order) into a sample.
  ScoredSample combine(const std::vector<PartResult>& results) const;
  // Scores inline, without timeouts (tests, single-threaded tools).
  ScoredSample score(const RewardInput& input) const;

 private:
  std::vector<WeightedReward> parts_;
  double fallback_score_;
};

}  // namespace flywheel::rewards
