// Logging facade. spdlog stays behind it (src/core/logging.cc), so no public header pulls it in.
//
//   FLYWHEEL_LOG_INFO("loaded %d prompts from %s", n, path);   // absl::StrFormat syntax
//
// Every line carries a per-process prefix "[role rank]" once set_log_prefix() was called, e.g.
// "[learner 3]". log() is thread-safe; call the setters at startup, before other threads log.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace flywheel::core {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Parses "trace" | "debug" | "info" | "warn" | "error" | "off".
absl::StatusOr<LogLevel> parse_log_level(absl::string_view name);

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool should_log(LogLevel level) { return level >= log_level(); }

// Sets the per-process prefix; rank < 0 prints the role alone.
void set_log_prefix(absl::string_view role, int rank);

// Also writes every log line to `path` (appending); empty path stops file logging.
absl::Status set_log_file(const std::string& path);

void log(LogLevel level, absl::string_view message);

}  // namespace flywheel::core

#define FLYWHEEL_LOG_AT_(level, ...)                                \
  do {                                                              \
    if (::flywheel::core::should_log(level)) {                      \
      ::flywheel::core::log(level, ::absl::StrFormat(__VA_ARGS__)); \
    }                                                               \
  } while (0)
#define FLYWHEEL_LOG_TRACE(...) FLYWHEEL_LOG_AT_(::flywheel::core::LogLevel::kTrace, __VA_ARGS__)
#define FLYWHEEL_LOG_DEBUG(...) FLYWHEEL_LOG_AT_(::flywheel::core::LogLevel::kDebug, __VA_ARGS__)
#define FLYWHEEL_LOG_INFO(...) FLYWHEEL_LOG_AT_(::flywheel::core::LogLevel::kInfo, __VA_ARGS__)
#define FLYWHEEL_LOG_WARN(...) FLYWHEEL_LOG_AT_(::flywheel::core::LogLevel::kWarn, __VA_ARGS__)
#define FLYWHEEL_LOG_ERROR(...) FLYWHEEL_LOG_AT_(::flywheel::core::LogLevel::kError, __VA_ARGS__)
