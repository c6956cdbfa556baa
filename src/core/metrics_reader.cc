#include "flywheel/core/metrics_reader.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"

namespace flywheel::core {

absl::StatusOr<MetricsFile> read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open metrics file '", path, "'"));
  MetricsFile file;
  std::string line;
  int64_t line_number = 0;
  int64_t good_lines = 0;
  auto skip = [&](const std::string& why) {
    if (file.skipped_lines++ == 0) {
      file.first_skip_reason = absl::StrCat(path, ":", line_number, ": ", why);
    }
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    absl::StatusOr<core::Json> record = core::Json::parse(line);
    if (!record.ok()) {
      skip(absl::StrCat("not JSON: ", record.status().message()));
      continue;
    }
    const core::Json* step = record->find("step");
    const core::Json* scalars = record->find("scalars");
    if (step == nullptr || !step->is_integer() || scalars == nullptr || !scalars->is_object()) {
      skip("expected {\"step\": N, \"scalars\": {...}}");
      continue;
    }
    ++good_lines;
    for (const auto& [name, value] : scalars->as_object()) {
      if (value.is_number())
        file.series[name].points.emplace_back(step->as_int(), value.as_double());
    }
  }
  if (good_lines == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no metrics in '", path, "'",
                     file.skipped_lines ? absl::StrCat(" (", file.first_skip_reason, ")") : ""));
  }
  return file;
}

}  // namespace flywheel::core
