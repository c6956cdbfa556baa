// Factories of the built-in rewards, for register_rewards_builtins() (builtins.cc).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards {

using RewardPtr = absl::StatusOr<std::unique_ptr<RewardFunction>>;

RewardPtr make_exact_match_reward(const RewardSpec& spec);         // exact_match_reward.cc
RewardPtr make_format_regex_reward(const RewardSpec& spec);        // format_regex_reward.cc
RewardPtr make_overlong_penalty_reward(const RewardSpec& spec);    // length_rewards.cc
RewardPtr make_length_penalty_reward(const RewardSpec& spec);      // length_rewards.cc
RewardPtr make_repetition_penalty_reward(const RewardSpec& spec);  // length_rewards.cc
RewardPtr make_math_reward(const RewardSpec& spec);                // math/math_reward.cc
RewardPtr make_code_exec_reward(const RewardSpec& spec);           // sandbox/code_exec_reward.cc

}  // namespace flywheel::rewards
