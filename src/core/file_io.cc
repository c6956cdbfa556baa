#include "flywheel/core/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace flywheel::core {

absl::StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<Json> read_json_file(const std::string& path) {
  absl::StatusOr<std::string> text = read_file(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Json> json = Json::parse(*text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", json.status().message()));
  }
  return json;
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
