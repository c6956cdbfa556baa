#include "jsonl_io.h"

#include "absl/strings/str_cat.h"

namespace flywheel::cli {

absl::StatusOr<std::unique_ptr<JsonlReader>> JsonlReader::open(const std::string& path) {
  std::unique_ptr<JsonlReader> reader(new JsonlReader());
  reader->path_ = path == "-" ? "<stdin>" : path;
  if (path == "-") {
    reader->in_ = &std::cin;
  } else {
    reader->file_.open(path, std::ios::binary);
    if (!reader->file_) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
    reader->in_ = &reader->file_;
  }
  return reader;
}

std::string JsonlReader::where() const { return absl::StrCat(path_, ":", line_); }

absl::StatusOr<std::optional<core::Json>> JsonlReader::next() {
  std::string line;
  while (std::getline(*in_, line)) {
    ++line_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    absl::StatusOr<core::Json> json = core::Json::parse(line);
    if (!json.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": ", json.status().message()));
    }
    if (!json->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": expected a JSON object"));
    }
    return std::optional<core::Json>(std::move(*json));
  }
  return std::optional<core::Json>();
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::open(const std::string& path) {
  std::unique_ptr<JsonlWriter> writer(new JsonlWriter());
  writer->path_ = path;
  if (path.empty() || path == "-") {
    writer->out_ = &std::cout;
  } else {
    writer->file_.open(path, std::ios::binary | std::ios::trunc);
    if (!writer->file_) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
    writer->out_ = &writer->file_;
  }
  return writer;
}

void JsonlWriter::write(const core::Json& value) {
  std::string line = value.dump();
  line.push_back('\n');
  out_->write(line.data(), static_cast<std::streamsize>(line.size()));
}

absl::Status JsonlWriter::close() {
  out_->flush();
  if (file_.is_open()) file_.close();
  if (!*out_ && out_ != &std::cout) {
    return absl::UnavailableError(absl::StrCat("writing '", path_, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::cli
