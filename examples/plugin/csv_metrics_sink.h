// A metrics sink that appends `step,name,value` rows to <run_dir>/metrics.csv.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "flywheel/core/metrics.h"

namespace flywheel_example {

class CsvMetricsSink : public flywheel::core::MetricsSink {
 public:
  // The factory registered as "csv". Unavailable when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<flywheel::core::MetricsSink>> create(
      const flywheel::core::MetricsSinkOptions& options);

  absl::Status write(const flywheel::core::StepMetrics& metrics) override;
  absl::Status flush() override;

 private:
  CsvMetricsSink(std::string path, std::ofstream out)
      : path_(std::move(path)), out_(std::move(out)) {}

  std::string path_;
  std::ofstream out_;
};

}  // namespace flywheel_example
