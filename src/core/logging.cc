#include "flywheel/core/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace flywheel::core {
namespace {

constexpr const char* kLoggerName = "flywheel";

// The process-wide logger lives in spdlog's registry (the facade's single piece of state).
std::shared_ptr<spdlog::logger> logger() {
  if (auto existing = spdlog::get(kLoggerName)) return existing;
  auto created = std::make_shared<spdlog::logger>(
      kLoggerName, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  created->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  created->set_level(spdlog::level::info);
  created->flush_on(spdlog::level::warn);
  try {
    spdlog::register_logger(created);
  } catch (const spdlog::spdlog_ex&) {
    return spdlog::get(kLoggerName);  // another thread registered it first
  }
  return created;
}

// Set once at startup (set_log_prefix is not meant to race with logging threads).
std::string& current_prefix() {
  static std::string prefix;
  return prefix;
}

std::string pattern_with(absl::string_view prefix) {
  return absl::StrCat("%Y-%m-%d %H:%M:%S.%e %^%L%$ ", prefix, "%v");
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

absl::StatusOr<LogLevel> parse_log_level(absl::string_view name) {
  if (name == "trace") return LogLevel::kTrace;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "'; expected trace, debug, info, warn, error or off"));
}

void set_log_level(LogLevel level) { logger()->set_level(to_spdlog(level)); }

LogLevel log_level() {
  switch (logger()->level()) {
    case spdlog::level::trace:
      return LogLevel::kTrace;
    case spdlog::level::debug:
      return LogLevel::kDebug;
    case spdlog::level::info:
      return LogLevel::kInfo;
    case spdlog::level::warn:
      return LogLevel::kWarn;
    case spdlog::level::err:
    case spdlog::level::critical:
      return LogLevel::kError;
    default:
      return LogLevel::kOff;
  }
}

void set_log_prefix(absl::string_view role, int rank) {
  std::string prefix =
      rank < 0 ? absl::StrCat("[", role, "] ") : absl::StrCat("[", role, " ", rank, "] ");
  auto log = logger();
  log->set_pattern(pattern_with(prefix));
  current_prefix() = prefix;
}

absl::Status set_log_file(const std::string& path) {
  auto log = logger();
  auto& sinks = log->sinks();
  // Keep the console sink (first); replace any file sink.
  if (sinks.size() > 1) sinks.resize(1);
  if (path.empty()) return absl::OkStatus();
  try {
    auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    file_sink->set_pattern(pattern_with(current_prefix()));
    sinks.push_back(file_sink);
  } catch (const spdlog::spdlog_ex& e) {
    return absl::UnavailableError(absl::StrCat("cannot open log file '", path, "': ", e.what()));
  }
  return absl::OkStatus();
}

void log(LogLevel level, absl::string_view message) {
  logger()->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

}  // namespace flywheel::core
