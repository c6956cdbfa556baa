#include "flywheel/core/jsonl_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"

namespace flywheel::core {
namespace {

constexpr size_t kReadChunk = size_t{64} << 10;

}  // namespace

absl::StatusOr<std::unique_ptr<JsonlReader>> JsonlReader::open(const std::string& path) {
  return open(path, Options());
}

absl::StatusOr<std::unique_ptr<JsonlReader>> JsonlReader::open(const std::string& path,
                                                               const Options& options) {
  std::unique_ptr<JsonlReader> reader(new JsonlReader());
  reader->options_ = options;
  reader->path_ = path == "-" ? "<stdin>" : path;
  if (path == "-") {
    reader->fd_ = STDIN_FILENO;
  } else {
    // Refused before opening: opening a device may have side effects, and a FIFO blocks.
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read '", path, "': it is ",
                                                     core::file_type_name(st.st_mode),
                                                     ", not a file or a pipe"));
    }
    reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (reader->fd_ < 0) {
      return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
    }
    reader->owns_fd_ = true;
  }
  struct stat st;
  if (fstat(reader->fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", reader->path_, "': it is a directory"));
  }
  return reader;
}

JsonlReader::~JsonlReader() {
  if (owns_fd_) ::close(fd_);
}

std::string JsonlReader::where() const { return absl::StrCat(path_, ":", line_); }

bool JsonlReader::fill() {
  if (eof_) return false;
  if (buffer_.size() < kReadChunk) buffer_.resize(kReadChunk);
  while (true) {
    ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
    if (n > 0) {
      buffer_pos_ = 0;
      buffer_end_ = static_cast<size_t>(n);
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) read_errno_ = errno;
    eof_ = true;
    return false;
  }
}

JsonlReader::LineStatus JsonlReader::read_line(std::string* line) {
  line->clear();
  bool any = false;
  while (true) {
    if (buffer_pos_ == buffer_end_ && !fill()) {
      if (read_errno_ != 0) return LineStatus::kError;
      return any ? LineStatus::kLine : LineStatus::kEnd;
    }
    any = true;
    const char* begin = buffer_.data() + buffer_pos_;
    const size_t available = buffer_end_ - buffer_pos_;
    const void* newline = std::memchr(begin, '\n', available);
    const size_t take =
        newline ? static_cast<size_t>(static_cast<const char*>(newline) - begin) : available;
    if (static_cast<int64_t>(line->size() + take) > options_.max_line_bytes) {
      line->clear();
      return LineStatus::kTooLong;  // the rest is skipped by the next call
    }
    line->append(begin, take);
    buffer_pos_ += take;
    if (newline) {
      ++buffer_pos_;
      return LineStatus::kLine;
    }
  }
}

JsonlReader::LineStatus JsonlReader::skip_line() {
  while (true) {
    if (buffer_pos_ == buffer_end_ && !fill()) {
      return read_errno_ != 0 ? LineStatus::kError : LineStatus::kEnd;
    }
    const char* begin = buffer_.data() + buffer_pos_;
    const void* newline = std::memchr(begin, '\n', buffer_end_ - buffer_pos_);
    if (newline) {
      buffer_pos_ += static_cast<const char*>(newline) - begin + 1;
      return LineStatus::kLine;
    }
    buffer_pos_ = buffer_end_;
  }
}

absl::StatusOr<std::optional<core::Json>> JsonlReader::next() {
  auto read_error = [&] {
    return absl::UnavailableError(
        absl::StrCat("error reading '", path_, "': ", std::strerror(read_errno_)));
  };
  if (skip_rest_of_line_) {
    skip_rest_of_line_ = false;
    if (skip_line() == LineStatus::kError) {
      read_errno_ = 0;
      return read_error();
    }
  }
  std::string line;
  while (true) {
    const LineStatus status = read_line(&line);
    if (status == LineStatus::kEnd) return std::optional<core::Json>();
    if (status == LineStatus::kError) {
      absl::Status error = read_error();
      read_errno_ = 0;  // reported once; the input then ends
      return error;
    }
    ++line_;
    if (status == LineStatus::kTooLong) {
      skip_rest_of_line_ = true;
      return absl::InvalidArgumentError(absl::StrCat(where(), ": line is longer than ",
                                                     options_.max_line_bytes,
                                                     " bytes (the limit for one JSONL line)"));
    }
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

}  // namespace flywheel::core
