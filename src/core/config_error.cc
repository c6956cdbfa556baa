#include "config_error.h"

#include "absl/strings/str_cat.h"

namespace flywheel::core {

std::string SourceLocation::to_string() const {
  if (line <= 0) return source;
  return absl::StrCat(source, ":", line, ":", column);
}

std::string ConfigError::to_string() const {
  std::string out = where.to_string();
  if (!out.empty()) out += ": ";
  if (!path.empty()) absl::StrAppend(&out, path, ": ");
  out += message;
  return out;
}

}  // namespace flywheel::core
