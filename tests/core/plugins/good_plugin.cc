// A well-formed plugin: registers a metrics sink "memory" that counts the steps it was given.
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"

namespace {

class CountingSink : public flywheel::core::MetricsSink {
 public:
  absl::Status write(const flywheel::core::StepMetrics&) override { return absl::OkStatus(); }
  absl::Status flush() override { return absl::OkStatus(); }
};

}  // namespace

FLYWHEEL_PLUGIN_ABI()

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
  using flywheel::core::MetricsSink;
  using flywheel::core::MetricsSinkOptions;
  (void)registry.get<MetricsSink, const MetricsSinkOptions&>().add(
      "memory", [](const MetricsSinkOptions&) -> absl::StatusOr<std::unique_ptr<MetricsSink>> {
        return std::make_unique<CountingSink>();
      });
}
