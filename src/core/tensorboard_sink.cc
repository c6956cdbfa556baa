#include "tensorboard_sink.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::core {
namespace {

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_fixed(std::string* out, const void* data, size_t size) {
  // Protobuf fixed-width fields are little-endian, as is every platform flywheel builds on.
  out->append(static_cast<const char*>(data), size);
}

void put_bytes_field(std::string* out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out->append(bytes);
}

void put_u64_le(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_u32_le(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_event(double wall_time, int64_t step, const std::string& file_version,
                         const std::string& tag, float simple_value) {
  std::string event;
  event.push_back(0x09);  // field 1 (wall_time), fixed64
  put_fixed(&event, &wall_time, sizeof(wall_time));
  event.push_back(0x10);  // field 2 (step), varint
  put_varint(&event, static_cast<uint64_t>(step));
  if (!file_version.empty()) {
    put_bytes_field(&event, 3, file_version);
    return event;
  }
  std::string value;
  put_bytes_field(&value, 1, tag);  // Summary.Value.tag
  value.push_back(0x15);            // field 2 (simple_value), fixed32
  put_fixed(&value, &simple_value, sizeof(simple_value));
  std::string summary;
  put_bytes_field(&summary, 1, value);  // Summary.value
  put_bytes_field(&event, 5, summary);  // Event.summary
  return event;
}

std::string frame_tfrecord(const std::string& data) {
  std::string out;
  put_u64_le(&out, data.size());
  put_u32_le(&out, mask_crc32c(crc32c(out.data(), 8)));
  out += data;
  put_u32_le(&out, mask_crc32c(crc32c(data.data(), data.size())));
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsSink>> TensorBoardSink::create(
    const MetricsSinkOptions& options) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(options.run_dir) / "tensorboard";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("tensorboard sink: cannot create '", dir.string(), "': ", ec.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  double now = now_seconds();
  std::string path = (dir / absl::StrCat("events.out.tfevents.", static_cast<int64_t>(now), ".",
                                         host, ".", getpid()))
                         .string();
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("tensorboard sink: cannot open '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardSink> sink(new TensorBoardSink(path, file));
  FLYWHEEL_RETURN_IF_ERROR(sink->append(encode_event(now, 0, "brain.Event:2", "", 0)));
  return std::unique_ptr<MetricsSink>(std::move(sink));
}

TensorBoardSink::~TensorBoardSink() { std::fclose(file_); }

absl::Status TensorBoardSink::append(const std::string& event) {
  std::string record = frame_tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return absl::UnavailableError(
        absl::StrCat("tensorboard sink: write to '", path_, "' failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardSink::write(const StepMetrics& metrics) {
  for (const auto& [name, value] : metrics.scalars) {
    FLYWHEEL_RETURN_IF_ERROR(
        append(encode_event(metrics.wall_time, metrics.step, "", name, static_cast<float>(value))));
  }
  return flush();
}

absl::Status TensorBoardSink::flush() {
  if (std::fflush(file_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("tensorboard sink: flush of '", path_, "' failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
