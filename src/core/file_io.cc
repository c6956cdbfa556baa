#include "flywheel/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::core {

std::string file_type_name(unsigned int st_mode) {
  if (S_ISREG(st_mode)) return "a regular file";
  if (S_ISDIR(st_mode)) return "a directory";
  if (S_ISFIFO(st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st_mode)) return "a character device";
  if (S_ISBLK(st_mode)) return "a block device";
  if (S_ISSOCK(st_mode)) return "a socket";
  return "not a regular file";
}

absl::StatusOr<std::string> read_file(const std::string& path, const ReadFileOptions& options) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read '", path, "': it is ", file_type_name(st.st_mode), ", not a regular file"));
  }
  auto too_large = [&](int64_t size) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read '", path, "': ", size,
                                                   " bytes is more than the limit of ",
                                                   options.max_bytes, " bytes"));
  };
  if (st.st_size > options.max_bytes) return too_large(st.st_size);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t size = 0;
  while (true) {
    if (size == text.size()) {
      // The file grew since fstat: read on, up to the limit.
      if (static_cast<int64_t>(size) >= options.max_bytes + 1) return too_large(size);
      text.resize(std::min<int64_t>(options.max_bytes + 1, size + 65536));
    }
    ssize_t n = ::read(fd, text.data() + size, text.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat("error reading '", path, "': ", std::strerror(errno)));
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  if (static_cast<int64_t>(size) > options.max_bytes) return too_large(size);
  text.resize(size);
  return text;
}

absl::StatusOr<Json> read_json_file(const std::string& path) {
  ReadFileOptions options;
  options.max_bytes = ReadFileOptions::kDefaultMaxJsonBytes;
  return read_json_file(path, options);
}

absl::StatusOr<Json> read_json_file(const std::string& path, const ReadFileOptions& options) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::string text, read_file(path, options));
  absl::StatusOr<Json> json = Json::parse(text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", json.status().message()));
  }
  return json;
}
absl::StatusOr<std::string> read_token_file(const std::string& path) {
  absl::StatusOr<std::string> text = read_file(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("cannot read token file '", path, "'"));
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::NotFoundError(absl::StrCat("token file '", path, "' is empty"));
  return token;
}

absl::Status write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
