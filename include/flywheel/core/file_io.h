// Whole-file reads and atomic writes, with errors that name the file.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"

namespace flywheel::core {

// The file's bytes. NotFound "cannot read '<path>'" when it cannot be opened.
absl::StatusOr<std::string> read_file(const std::string& path);

// read_file() then Json::parse(); a parse error is InvalidArgument "<path>: line L, column C: ...".
absl::StatusOr<Json> read_json_file(const std::string& path);

// Writes `<path>.tmp`, then renames it over `path`: readers never see a half-written file.
// Unavailable (naming the file) on failure.
absl::Status write_file_atomically(const std::string& path, const std::string& text);

}  // namespace flywheel::core
