// Registers a new name and then a name that the built-ins already own.
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"

namespace {

absl::StatusOr<std::unique_ptr<flywheel::core::MetricsSink>> no_sink(
    const flywheel::core::MetricsSinkOptions&) {
  return absl::UnimplementedError("never built");
}

}  // namespace

FLYWHEEL_PLUGIN_ABI()

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
  auto& sinks =
      registry.get<flywheel::core::MetricsSink, const flywheel::core::MetricsSinkOptions&>();
  (void)sinks.add("fresh_name", &no_sink);
  (void)sinks.add("console", &no_sink);  // ignores the error on purpose
}
