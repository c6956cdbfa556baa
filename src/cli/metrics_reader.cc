#include "metrics_reader.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace flywheel::cli {

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
    google::protobuf::Struct record;
    auto parsed = google::protobuf::util::JsonStringToMessage(line, &record);
    if (!parsed.ok()) {
      skip(absl::StrCat("not a JSON object: ", parsed.message().as_string()));
      continue;
    }
    const auto& fields = record.fields();
    auto step = fields.find("step");
    auto scalars = fields.find("scalars");
    if (step == fields.end() || !step->second.has_number_value() || scalars == fields.end() ||
        !scalars->second.has_struct_value()) {
      skip("expected {\"step\": N, \"scalars\": {...}}");
      continue;
    }
    ++good_lines;
    auto step_value = static_cast<int64_t>(step->second.number_value());
    for (const auto& [name, value] : scalars->second.struct_value().fields()) {
      if (value.has_number_value()) {
        file.series[name].points.emplace_back(step_value, value.number_value());
      }
    }
  }
  if (good_lines == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no metrics in '", path, "'",
                     file.skipped_lines ? absl::StrCat(" (", file.first_skip_reason, ")") : ""));
  }
  return file;
}

}  // namespace flywheel::cli
