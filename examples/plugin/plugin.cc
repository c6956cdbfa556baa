// The plugin's entry points: the ABI version and flywheel_register_plugin().
#include "csv_metrics_sink.h"
#include "flywheel/core/plugin_registry.h"

FLYWHEEL_PLUGIN_ABI()

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
  auto& sinks =
      registry.get<flywheel::core::MetricsSink, const flywheel::core::MetricsSinkOptions&>();
  // A failed add() (e.g. a name taken by another plugin) is reported by the loader.
  (void)sinks.add("csv", &flywheel_example::CsvMetricsSink::create);
}
