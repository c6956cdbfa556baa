// A plugin whose entry point throws after registering something.
#include <stdexcept>

#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"

FLYWHEEL_PLUGIN_ABI()

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
  (void)registry.get<flywheel::core::MetricsSink, const flywheel::core::MetricsSinkOptions&>().add(
      "half_done",
      [](const flywheel::core::MetricsSinkOptions&)
          -> absl::StatusOr<std::unique_ptr<flywheel::core::MetricsSink>> {
        return absl::UnimplementedError("never built");
      });
  throw std::runtime_error("plugin could not initialise its device");
}
