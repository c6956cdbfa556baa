#include "flywheel/trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace flywheel::trainer {

absl::StatusOr<LrSchedule> LrSchedule::create(const LrScheduleOptions& o) {
  // The bounds of trainer.lr, warmup_steps, total_steps and min_lr_ratio (core's
  // trainer_options.cc), for options built in code rather than loaded.
  if (!(o.lr > 0)) return absl::InvalidArgumentError("trainer.lr must be > 0");
  if (o.warmup_steps < 0 || o.total_steps < 1) {
    return absl::InvalidArgumentError("trainer.warmup_steps >= 0 and total_steps >= 1 needed");
  }
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) {
    return absl::InvalidArgumentError("trainer.min_lr_ratio must be in [0, 1]");
  }
  return LrSchedule(o);
}

double LrSchedule::at(int64_t step) const {
  if (step < o_.warmup_steps) return o_.lr * static_cast<double>(step + 1) / o_.warmup_steps;
  if (o_.schedule == core::LrScheduleKind::kConstant) return o_.lr;
  const int64_t span = std::max<int64_t>(1, o_.total_steps - o_.warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - o_.warmup_steps) / span, 0.0, 1.0);
  const double r = o_.min_lr_ratio;
  if (o_.schedule == core::LrScheduleKind::kLinear) return o_.lr * (1 - (1 - r) * progress);
  return o_.lr * (r + (1 - r) * 0.5 * (1 + std::cos(M_PI * progress)));
}

}  // namespace flywheel::trainer
