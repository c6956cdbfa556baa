#include "csv_metrics_sink.h"

#include <filesystem>

namespace flywheel_example {

absl::StatusOr<std::unique_ptr<flywheel::core::MetricsSink>> CsvMetricsSink::create(
    const flywheel::core::MetricsSinkOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.run_dir, ec);
  std::string path = (std::filesystem::path(options.run_dir) / "metrics.csv").string();
  bool fresh = !std::filesystem::exists(path, ec);
  std::ofstream out(path, std::ios::app);
  if (!out) return absl::UnavailableError("csv sink: cannot open " + path);
  if (fresh) out << "step,name,value\n";
  return std::unique_ptr<flywheel::core::MetricsSink>(new CsvMetricsSink(path, std::move(out)));
}

absl::Status CsvMetricsSink::write(const flywheel::core::StepMetrics& metrics) {
  for (const auto& [name, value] : metrics.scalars) {
    out_ << metrics.step << "," << name << "," << value << "\n";
  }
  return flush();
}

absl::Status CsvMetricsSink::flush() {
  out_.flush();
  return out_ ? absl::OkStatus()
              : absl::UnavailableError("csv sink: write to " + path_ + " failed");
}

}  // namespace flywheel_example
