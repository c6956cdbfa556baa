// Algorithm presets: algorithm.name expands into estimator, policy loss, aggregation, clip
// ranges, KL settings, IS correction and group filter. Keys the config sets explicitly win.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/config_loader.h"

namespace flywheel::algos {

// The preset names: ppo, grpo, dapo, dr_grpo, gspo, rloo, reinforce_pp.
std::vector<std::string> preset_names();

// Fills every algorithm.* key (and buffer.filter) that `loaded` did not set explicitly with the
// value of the preset algorithm.name. InvalidArgument for an unknown preset.
absl::Status apply_algorithm_preset(core::LoadedConfig* loaded);

}  // namespace flywheel::algos
