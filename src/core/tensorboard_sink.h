// Writes TensorBoard event files: TFRecord framing around tensorflow.Event protos.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/metrics.h"

namespace flywheel::core {

// Encodes a tensorflow.Event with wall_time, step and either file_version or one scalar
// Summary.Value {tag, simple_value}; protobuf wire format, written by hand so that core does
// not depend on protobuf.
std::string encode_event(double wall_time, int64_t step, const std::string& file_version,
                         const std::string& tag, float simple_value);

// A TFRecord: length (u64 LE), masked CRC-32C of the length, data, masked CRC-32C of the data.
std::string frame_tfrecord(const std::string& data);

class TensorBoardSink : public MetricsSink {
 public:
  // Creates <run_dir>/tensorboard/events.out.tfevents.<seconds>.<host>.<pid> and writes the
  // file_version event.
  static absl::StatusOr<std::unique_ptr<MetricsSink>> create(const MetricsSinkOptions& options);
  ~TensorBoardSink() override;

  absl::Status write(const StepMetrics& metrics) override;
  absl::Status flush() override;

  const std::string& path() const { return path_; }

 private:
  TensorBoardSink(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status append(const std::string& event);

  std::string path_;
  std::FILE* file_;
};

}  // namespace flywheel::core
