#include "flywheel/rewards/builtins.h"

#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::rewards {

absl::Status register_rewards_builtins(core::PluginRegistry& registry) {
  auto& rewards = registry.get<RewardFunction, const RewardSpec&>();
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("exact_match", &make_exact_match_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("math", &make_math_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("format_regex", &make_format_regex_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("overlong_penalty", &make_overlong_penalty_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("length_penalty", &make_length_penalty_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("repetition_penalty", &make_repetition_penalty_reward));
  FLYWHEEL_RETURN_IF_ERROR(rewards.add("code_exec", &make_code_exec_reward));
  return absl::OkStatus();
}

}  // namespace flywheel::rewards
