// The explicit list of built-in rewards (DESIGN.md §5): exact_match, math, format_regex,
// overlong_penalty, length_penalty, repetition_penalty, code_exec. The learned reward model is
// registered by flywheel_reward_model (flywheel/rewards/model/reward_model.h), which links
// LibTorch.
#pragma once

#include "absl/status/status.h"
#include "flywheel/core/plugin_registry.h"

namespace flywheel::rewards {

absl::Status register_rewards_builtins(core::PluginRegistry& registry);

}  // namespace flywheel::rewards
