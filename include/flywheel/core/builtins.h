// The explicit list of core built-ins (DESIGN.md §5): metrics sinks console, jsonl, tensorboard.
#pragma once

#include "absl/status/status.h"
#include "flywheel/core/plugin_registry.h"

namespace flywheel::core {

// Registers core's built-ins into `registry`; call once per registry, before loading plugins.
absl::Status register_core_builtins(PluginRegistry& registry);

}  // namespace flywheel::core
