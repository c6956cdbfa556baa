// Training metrics: log_scalar(name, value, step) fanned out to sinks.
//
//   auto metrics = MetricsLogger::create(options, plugins);   // sinks by name: console, jsonl,
//   (*metrics)->log_scalar("loss", 0.25, /*step=*/3);          // tensorboard, or a plugin's
//
// Scalars are grouped by step: when a scalar of a new step arrives (or on flush()), the finished
// step is written to every sink as one StepMetrics. Files written under options.run_dir:
// metrics.jsonl (one JSON object per step) and tensorboard/events.out.tfevents.* (TFRecord-framed
// tensorflow.Event protos, readable by TensorBoard).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/registry.h"

namespace flywheel::core {

class PluginRegistry;

// The scalars of one step, in the order they were first logged.
struct StepMetrics {
  int64_t step = 0;
  double wall_time = 0;  // seconds since the Unix epoch, when the step was written
  std::vector<std::pair<std::string, double>> scalars;
};

struct MetricsSinkOptions {
  std::string run_dir;              // directory for file sinks; created when missing
  int64_t total_steps = 0;          // for the console progress bar and ETA; 0 = unknown
  double console_interval_s = 5.0;  // console: at most one line per interval (0 = every step)
  std::ostream* console = nullptr;  // console output; nullptr = std::cerr
  // console: show only these metrics, each with its last value seen (a metric logged every N
  // steps stays on the line); empty = every metric of the step.
  std::vector<std::string> console_metrics;
};

// A destination for metrics. Not called concurrently (MetricsLogger serialises calls).
class MetricsSink {
 public:
  static constexpr char kRegistryKind[] = "metrics_sink";
  virtual ~MetricsSink() = default;
  virtual absl::Status write(const StepMetrics& metrics) = 0;
  virtual absl::Status flush() = 0;
};

using MetricsSinkRegistry = Registry<MetricsSink, const MetricsSinkOptions&>;

struct MetricsLoggerOptions {
  std::vector<std::string> sinks = {"console", "jsonl", "tensorboard"};
  MetricsSinkOptions sink_options;
  std::function<double()> clock;  // wall-clock seconds; empty = system clock
};

// Thread-safe.
class MetricsLogger {
 public:
  // Builds every sink by name from `registry`'s metrics_sink kind. Errors: NotFound for an
  // unknown sink name, or whatever a sink's factory returns (e.g. an unwritable run_dir).
  static absl::StatusOr<std::unique_ptr<MetricsLogger>> create(const MetricsLoggerOptions& options,
                                                               PluginRegistry& registry);
  ~MetricsLogger();  // flushes

  // Records `value` for `name` at `step`. Non-finite values are kept (and written as such).
  // A sink error does not throw: it is logged once and returned by the next flush().
  void log_scalar(absl::string_view name, double value, int64_t step);
  // Writes the pending step and flushes every sink; returns the first error since last flush.
  absl::Status flush();

 private:
  MetricsLogger(std::vector<std::unique_ptr<MetricsSink>> sinks, std::function<double()> clock);
  void write_pending_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void note_error_locked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::vector<std::unique_ptr<MetricsSink>> sinks_ ABSL_GUARDED_BY(mu_);
  std::function<double()> clock_;
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  StepMetrics pending_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::core
