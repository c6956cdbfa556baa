// Reads metrics.jsonl files written by the jsonl metrics sink.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::core {

struct MetricSeries {
  std::vector<std::pair<int64_t, double>> points;  // (step, value), in file order
};

struct MetricsFile {
  std::map<std::string, MetricSeries> series;  // by metric name
  int64_t skipped_lines = 0;  // malformed lines (e.g. a torn last line after a crash)
  std::string first_skip_reason;
};

// Parses every line of `path`. Non-numeric values ("nan") are skipped. NotFound when the file
// is missing; InvalidArgument when it holds no readable line.
absl::StatusOr<MetricsFile> read_metrics_jsonl(const std::string& path);

}  // namespace flywheel::core
