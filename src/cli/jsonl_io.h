// Line-by-line JSON input and output for the CLI tools ("-" = stdin / stdout).
#pragma once

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"

namespace flywheel::cli {

class JsonlReader {
 public:
  // NotFound when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<JsonlReader>> open(const std::string& path);
  // The next non-empty line as a JSON object; nullopt at the end. InvalidArgument naming
  // "path:line" for malformed JSON or a line that is not an object.
  absl::StatusOr<std::optional<core::Json>> next();
  // "path:line" of the last line returned, for error messages.
  std::string where() const;

 private:
  JsonlReader() = default;
  std::string path_;
  std::ifstream file_;
  std::istream* in_ = nullptr;
  int64_t line_ = 0;
};

class JsonlWriter {
 public:
  static absl::StatusOr<std::unique_ptr<JsonlWriter>> open(const std::string& path);
  void write(const core::Json& value);
  absl::Status close();

 private:
  JsonlWriter() = default;
  std::string path_;
  std::ofstream file_;
  std::ostream* out_ = nullptr;
};

}  // namespace flywheel::cli
