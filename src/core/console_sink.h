// Compact progress lines on the console:
//   step 12/100 [####................]  12%  1.50 s/step  ETA 2m12s | loss 0.2500  reward 0.5
// At most one line per console_interval_s (the last step is always printed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <iosfwd>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/metrics.h"

namespace flywheel::core {

// "2m12s", "1h03m", "45s".
std::string format_duration(double seconds);

class ConsoleSink : public MetricsSink {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsSink>> create(const MetricsSinkOptions& options);

  absl::Status write(const StepMetrics& metrics) override;
  absl::Status flush() override;

  // The line write() prints for `metrics` (no newline).
  std::string format_line(const StepMetrics& metrics);

 private:
  explicit ConsoleSink(const MetricsSinkOptions& options);

  std::ostream* out_;
  int64_t total_steps_;
  double interval_s_;
  bool started_ = false;
  int64_t first_step_ = 0;
  double first_time_ = 0;
  double last_print_ = 0;
  std::vector<std::string> shown_;             // console_metrics
  std::map<std::string, double> last_values_;  // of shown_, the last value seen
};

}  // namespace flywheel::core
