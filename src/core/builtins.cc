#include "flywheel/core/builtins.h"

#include "console_sink.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"
#include "jsonl_sink.h"
#include "tensorboard_sink.h"

namespace flywheel::core {

absl::Status register_core_builtins(PluginRegistry& registry) {
  auto& sinks = registry.get<MetricsSink, const MetricsSinkOptions&>();
  FLYWHEEL_RETURN_IF_ERROR(sinks.add("console", &ConsoleSink::create));
  FLYWHEEL_RETURN_IF_ERROR(sinks.add("jsonl", &JsonlSink::create));
  FLYWHEEL_RETURN_IF_ERROR(sinks.add("tensorboard", &TensorBoardSink::create));
  return absl::OkStatus();
}

}  // namespace flywheel::core
