// What every trainer of a sharded policy reads the same way from `trainer:`: micro-batch size,
// learning-rate schedule, AdamW, gradient clipping, skipped updates and sharding. SftOptions is
// this; LearnerOptions extends it with the RL keys.
#pragma once

#include <cstdint>

#include "flywheel/core/options/trainer_options.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

struct OptimizerOptions {
  int64_t micro_batch_tokens = 8192;
  LrScheduleOptions lr;
  AdamWOptions adamw;
  double grad_clip = 1.0;  // 0 = off
  int64_t max_consecutive_skips = 3;
  ShardingOptions sharding;

  static OptimizerOptions from_config(const core::TrainerOptions& trainer);
};

}  // namespace flywheel::trainer
