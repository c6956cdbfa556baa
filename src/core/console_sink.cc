#include "console_sink.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flywheel::core {
namespace {

constexpr int kBarWidth = 20;

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

absl::StatusOr<std::unique_ptr<MetricsSink>> ConsoleSink::create(
    const MetricsSinkOptions& options) {
  return std::unique_ptr<MetricsSink>(new ConsoleSink(options));
}

ConsoleSink::ConsoleSink(const MetricsSinkOptions& options)
    : out_(options.console ? options.console : &std::cerr),
      total_steps_(options.total_steps),
      interval_s_(options.console_interval_s),
      shown_(options.console_metrics) {}

std::string ConsoleSink::format_line(const StepMetrics& metrics) {
  if (!started_) {
    started_ = true;
    first_step_ = metrics.step;
    first_time_ = metrics.wall_time;
  }
  std::string line;
  if (total_steps_ > 0) {
    double fraction = std::clamp(static_cast<double>(metrics.step) / total_steps_, 0.0, 1.0);
    int filled = static_cast<int>(fraction * kBarWidth);
    line = absl::StrFormat("step %d/%d [%s%s] %3d%%", metrics.step, total_steps_,
                           std::string(filled, '#'), std::string(kBarWidth - filled, '.'),
                           static_cast<int>(fraction * 100));
  } else {
    line = absl::StrFormat("step %d", metrics.step);
  }
  int64_t steps_done = metrics.step - first_step_;
  if (steps_done > 0) {
    double per_step = (metrics.wall_time - first_time_) / steps_done;
    absl::StrAppend(&line, absl::StrFormat("  %.2f s/step", per_step));
    if (total_steps_ > 0) {
      absl::StrAppend(&line, "  ETA ", format_duration(per_step * (total_steps_ - metrics.step)));
    }
  }
  if (shown_.empty()) {
    if (!metrics.scalars.empty()) line += " |";
    for (const auto& [name, value] : metrics.scalars) {
      absl::StrAppend(&line, " ", name, " ", absl::StrFormat("%.4g", value));
    }
    return line;
  }
  std::string shown;
  for (const std::string& name : shown_) {
    for (const auto& [logged, value] : metrics.scalars) {
      if (logged == name) last_values_[name] = value;
    }
    auto last = last_values_.find(name);
    if (last != last_values_.end()) {
      absl::StrAppend(&shown, " ", name, " ", absl::StrFormat("%.4g", last->second));
    }
  }
  if (!shown.empty()) absl::StrAppend(&line, " |", shown);
  return line;
}

absl::Status ConsoleSink::write(const StepMetrics& metrics) {
  bool first = !started_;
  std::string line = format_line(metrics);
  bool last = total_steps_ > 0 && metrics.step >= total_steps_;
  if (first || last || metrics.wall_time - last_print_ >= interval_s_) {
    *out_ << line << "\n";
    out_->flush();
    last_print_ = metrics.wall_time;
  }
  return absl::OkStatus();
}

absl::Status ConsoleSink::flush() {
  out_->flush();
  return absl::OkStatus();
}

}  // namespace flywheel::core
