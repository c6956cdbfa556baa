#include "flywheel/core/metrics.h"

#include <chrono>

#include "flywheel/core/logging.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::core {
namespace {

double system_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::create(
    const MetricsLoggerOptions& options, PluginRegistry& registry) {
  auto& sinks_registry = registry.get<MetricsSink, const MetricsSinkOptions&>();
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  for (const std::string& name : options.sinks) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<MetricsSink> sink,
                              sinks_registry.create(name, options.sink_options));
    sinks.push_back(std::move(sink));
  }
  auto clock = options.clock ? options.clock : std::function<double()>(&system_seconds);
  return std::unique_ptr<MetricsLogger>(new MetricsLogger(std::move(sinks), std::move(clock)));
}

MetricsLogger::MetricsLogger(std::vector<std::unique_ptr<MetricsSink>> sinks,
                             std::function<double()> clock)
    : sinks_(std::move(sinks)), clock_(std::move(clock)) {}

MetricsLogger::~MetricsLogger() {
  absl::Status status = flush();
  if (!status.ok()) FLYWHEEL_LOG_WARN("metrics: %s", status.ToString());
}

void MetricsLogger::log_scalar(absl::string_view name, double value, int64_t step) {
  absl::MutexLock lock(&mu_);
  if (has_pending_ && pending_.step != step) write_pending_locked();
  if (!has_pending_) {
    pending_ = StepMetrics{};
    pending_.step = step;
    has_pending_ = true;
  }
  for (auto& [existing, v] : pending_.scalars) {
    if (existing == name) {  // the last value of a step wins
      v = value;
      return;
    }
  }
  pending_.scalars.emplace_back(std::string(name), value);
}

void MetricsLogger::write_pending_locked() {
  pending_.wall_time = clock_();
  for (auto& sink : sinks_) note_error_locked(sink->write(pending_));
  has_pending_ = false;
}

void MetricsLogger::note_error_locked(const absl::Status& status) {
  if (status.ok() || !first_error_.ok()) return;
  first_error_ = status;
  FLYWHEEL_LOG_WARN("metrics sink failed (later errors are not repeated): %s", status.ToString());
}

absl::Status MetricsLogger::flush() {
  absl::MutexLock lock(&mu_);
  if (has_pending_) write_pending_locked();
  for (auto& sink : sinks_) note_error_locked(sink->flush());
  absl::Status result = first_error_;
  first_error_ = absl::OkStatus();
  return result;
}

}  // namespace flywheel::core
