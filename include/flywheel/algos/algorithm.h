// The algorithm of a run, built from the (preset-expanded) config: estimator, policy loss, IS
// correction and their options, each looked up by name in the registries (so plugins work).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/algos/advantages.h"
#include "flywheel/algos/aggregation.h"
#include "flywheel/algos/is_correction.h"
#include "flywheel/algos/kl.h"
#include "flywheel/algos/policy_loss.h"
#include "flywheel/core/config.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::algos {

struct Algorithm {
  std::unique_ptr<AdvantageEstimator> estimator;
  std::unique_ptr<PolicyLoss> policy_loss;
  std::unique_ptr<IsCorrection> is_correction;
  AggMode agg = AggMode::kTokenMean;
  double norm_constant = 1;
  KlEstimator kl_estimator = KlEstimator::kK3;

  // Errors name the config key: NotFound (with the known names) for an unknown component.
  static absl::StatusOr<Algorithm> create(const core::Config& config,
                                          core::PluginRegistry& registry);
};

// Whether the config's advantage estimator needs a greedy baseline per prompt (remax): the
// workers then generate it and the controller requires it. NotFound for an unknown estimator.
absl::StatusOr<bool> needs_greedy_baseline(const core::Config& config,
                                           core::PluginRegistry& registry);

// The algos component's built-ins: estimators gae, grpo, dr_grpo, rloo, reinforce_pp,
// reinforce_pp_baseline, remax; losses ppo_clip, gspo, reinforce; IS corrections none, tis,
// seq_tis, icepop, seq_mask, decoupled; group filter nonzero_reward_std.
absl::Status register_algos_builtins(core::PluginRegistry& registry);

}  // namespace flywheel::algos
