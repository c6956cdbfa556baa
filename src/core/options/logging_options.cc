#include "flywheel/core/options/logging_options.h"

#include "absl/strings/str_cat.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, LoggingOptions& o) {
  b.field("level", &o.level,
          FieldInfo("Log level.").one_of({"trace", "debug", "info", "warn", "error"}));
  b.field("run_dir", &o.run_dir,
          FieldInfo("Directory for metrics.jsonl, TensorBoard events, logs and checkpoints."));
  b.field("sinks", &o.sinks,
          FieldInfo("Metrics sinks: console, jsonl, tensorboard, or a plugin's."));
  b.field("console_interval_s", &o.console_interval_s,
          FieldInfo("At most one console progress line per interval; 0 = every step.").min(0));
}

absl::Status LoggingOptions::validate() const {
  for (size_t i = 0; i < sinks.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (sinks[i] == sinks[j]) {
        return absl::InvalidArgumentError(absl::StrCat("sinks: '", sinks[i], "' listed twice"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
