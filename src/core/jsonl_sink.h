// Appends one JSON object per step to <run_dir>/metrics.jsonl:
//   {"step": 3, "wall_time": 1764460800.25, "scalars": {"loss": 0.25, "reward": "nan"}}
// Non-finite values are written as the strings "nan", "inf" and "-inf" (JSON has no such
// numbers) so that nothing logged is lost.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/metrics.h"

namespace flywheel::core {

class JsonlSink : public MetricsSink {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsSink>> create(const MetricsSinkOptions& options);
  ~JsonlSink() override;

  absl::Status write(const StepMetrics& metrics) override;
  absl::Status flush() override;

 private:
  JsonlSink(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
};

}  // namespace flywheel::core
