// Learning-rate schedules (trainer.lr_schedule): constant, linear or cosine decay to
// lr * min_lr_ratio at total_steps, after a linear warmup from 0 over warmup_steps.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/options/trainer_options.h"

namespace flywheel::trainer {

struct LrScheduleOptions {
  double lr = 1e-6;
  core::LrScheduleKind schedule = core::LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;
};

class LrSchedule {
 public:
  // InvalidArgument naming the option: lr <= 0, negative steps, ratio outside
  // [0, 1].
  static absl::StatusOr<LrSchedule> create(const LrScheduleOptions& options);
  // The learning rate of optimizer step `step` (0-based).
  double at(int64_t step) const;

 private:
  explicit LrSchedule(const LrScheduleOptions& options) : o_(options) {}
  LrScheduleOptions o_;
};

}  // namespace flywheel::trainer
