#include "jsonl_sink.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/json.h"
#include "format_number.h"

namespace flywheel::core {

namespace {

std::string json_quote(absl::string_view s) {
  std::string out;
  append_json_string(s, &out);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsSink>> JsonlSink::create(const MetricsSinkOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(options.run_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("jsonl sink: cannot create '", options.run_dir, "': ", ec.message()));
  }
  std::string path = (fs::path(options.run_dir) / "metrics.jsonl").string();
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("jsonl sink: cannot open '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsSink>(new JsonlSink(path, file));
}

JsonlSink::~JsonlSink() { std::fclose(file_); }

absl::Status JsonlSink::write(const StepMetrics& metrics) {
  std::string line = absl::StrCat("{\"step\": ", metrics.step,
                                  ", \"wall_time\": ", absl::StrFormat("%.3f", metrics.wall_time),
                                  ", \"scalars\": {");
  bool first = true;
  for (const auto& [name, value] : metrics.scalars) {
    absl::StrAppend(&line, first ? "" : ", ", json_quote(name), ": ",
                    std::isfinite(value) ? format_number(value) : json_quote(format_number(value)));
    first = false;
  }
  line += "}}\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    return absl::UnavailableError(
        absl::StrCat("jsonl sink: write to '", path_, "' failed: ", std::strerror(errno)));
  }
  return flush();
}

absl::Status JsonlSink::flush() {
  if (std::fflush(file_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("jsonl sink: flush of '", path_, "' failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
