// Line-by-line JSON input and output (JSONL files, pipes; the CLI tools read and write them) ("-" =
// stdin / stdout).
#pragma once

#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"

namespace flywheel::core {

class JsonlReader {
 public:
  struct Options {
    // A longer line is an error (a parsed JSON value takes ~100 bytes per element, so one huge
    // line would exhaust memory before it could be rejected). 16 MiB holds ~2M token ids.
    static constexpr int64_t kDefaultMaxLineBytes = int64_t{16} << 20;
    int64_t max_line_bytes = kDefaultMaxLineBytes;
  };

  // `path` must be "-" (stdin), a regular file, or a FIFO / pipe (read as a stream; opening a
  // FIFO waits for its writer). NotFound when it cannot be opened; InvalidArgument naming it when
  // it is a directory, a device or a socket.
  static absl::StatusOr<std::unique_ptr<JsonlReader>> open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<JsonlReader>> open(const std::string& path,
                                                           const Options& options);
  ~JsonlReader();

  // The next non-empty line as a JSON object; nullopt at the end. InvalidArgument naming
  // "path:line" for malformed JSON, a line that is not an object, or a line longer than
  // max_line_bytes; after such an error the next call continues with the following line (a
  // too-long line is skipped to its end without being buffered). Unavailable naming the path
  // for a read error, after which the input ends.
  absl::StatusOr<std::optional<core::Json>> next();
  // "path:line" of the last line returned or rejected, for error messages.
  std::string where() const;

 private:
  enum class LineStatus { kLine, kEnd, kTooLong, kError };

  JsonlReader() = default;
  // Reads the next line (without its '\n') into `line`.
  LineStatus read_line(std::string* line);
  // Discards input up to and including the next '\n'.
  LineStatus skip_line();
  bool fill();

  std::string path_;
  Options options_;
  int fd_ = -1;
  bool owns_fd_ = false;
  std::string buffer_;
  size_t buffer_pos_ = 0;
  size_t buffer_end_ = 0;
  bool eof_ = false;
  int read_errno_ = 0;
  bool skip_rest_of_line_ = false;
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

}  // namespace flywheel::core
