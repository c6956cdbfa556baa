// A configuration error with the place it came from.
#pragma once

#include <string>

namespace flywheel::core {

// Where a configuration value was written. line/column are 1-based; -1 when unknown (e.g. a
// --set override or a default).
struct SourceLocation {
  std::string source;  // file path, or "--set key=value"
  int line = -1;
  int column = -1;

  // "file:line:column", or just the source when the position is unknown.
  std::string to_string() const;
};

struct ConfigError {
  SourceLocation where;
  std::string path;  // key path, e.g. trainer.lr; may be empty for file-level errors
  std::string message;

  // "file:line:column: path: message" (parts that are unknown are left out).
  std::string to_string() const;
};

}  // namespace flywheel::core
