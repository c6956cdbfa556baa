// Whole-file reads and atomic writes, with errors that name the file.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"

namespace flywheel::core {

struct ReadFileOptions {
  // Larger files are refused. 1 GiB for read_file(); read_json_file() defaults to 64 MiB,
  // since a parsed JSON value takes ~100 bytes per element (50x the text of "[0,0,...]").
  static constexpr int64_t kDefaultMaxBytes = int64_t{1} << 30;
  static constexpr int64_t kDefaultMaxJsonBytes = int64_t{64} << 20;
  int64_t max_bytes = kDefaultMaxBytes;
};

// The bytes of the regular file `path`. NotFound "cannot read '<path>': <reason>" when it cannot
// be opened; InvalidArgument naming it when it is not a regular file (a directory, a FIFO, a
// device such as /dev/zero: refused without reading, so a FIFO never blocks) or is larger than
// options.max_bytes; Unavailable for a read error.
absl::StatusOr<std::string> read_file(const std::string& path, const ReadFileOptions& options = {});

// read_file() (at most kDefaultMaxJsonBytes unless `options` says otherwise) then Json::parse();
// a parse error is InvalidArgument "<path>: line L, column C: ...".
absl::StatusOr<Json> read_json_file(const std::string& path);
absl::StatusOr<Json> read_json_file(const std::string& path, const ReadFileOptions& options);

// A shared secret's file: its content without surrounding whitespace (a token on one line).
// NotFound "cannot read token file '<path>'" or "token file '<path>' is empty".
absl::StatusOr<std::string> read_token_file(const std::string& path);

// "a directory", "a FIFO", "a character device", ... for a st_mode that is not a regular file.
std::string file_type_name(unsigned int st_mode);

// Writes `<path>.tmp`, then renames it over `path`: readers never see a half-written file.
// Unavailable (naming the file) on failure.
absl::Status write_file_atomically(const std::string& path, const std::string& text);

}  // namespace flywheel::core
