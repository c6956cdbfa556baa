// `logging:` — log level, run directory and metrics sinks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct LoggingOptions {
  std::string level = "info";             // trace | debug | info | warn | error
  std::string run_dir = "runs/flywheel";  // metrics, logs and (by default) checkpoints
  std::vector<std::string> sinks = {"console", "jsonl", "tensorboard"};
  double console_interval_s = 5.0;  // at most one progress line per interval (0 = every step)

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, LoggingOptions& o);

}  // namespace flywheel::core
