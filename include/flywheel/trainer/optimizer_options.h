// What every trainer of a sharded policy reads the same way from `trainer:`: micro-batch size,
// learning-rate schedule, AdamW, gradient clipping, skipped updates and sharding. SftOptions is
// this; LearnerOptions extends it with the RL keys.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"

#include "flywheel/core/options/trainer_options.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/micro_batch.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

struct OptimizerOptions {
  int64_t micro_batch_tokens = 8192;
  bool shared_prefix = true;  // trainer.shared_prefix (PackOptions::shared_prefix)
  LrScheduleOptions lr;
  AdamWOptions adamw;
  double grad_clip = 1.0;  // 0 = off
  int64_t max_consecutive_skips = 3;
  ShardingOptions sharding;

  // How micro-batches of responses up to `max_response` tokens are packed. Trainers turn
  // shared_prefix off under the load-balancing loss (it counts every sample's prompt tokens).
  PackOptions pack_options(int64_t max_response) const;

  // `model_path`: model.path, the frozen base weights of trainer.lora.
  static OptimizerOptions from_config(const core::TrainerOptions& trainer,
                                      const std::string& model_path = "");
};

// A trainer's optimizer steps and its run of skipped (non-finite) updates, kept in checkpoints
// as the scalars "steps" and "consecutive_skips".
struct UpdateCounters {
  int64_t steps = 0;
  int64_t consecutive_skips = 0;

  // Counts update `u`: FailedPrecondition once `max_consecutive_skips` in a row were skipped
  // ("N consecutive WHAT updates had a non-finite loss or gradient norm ...").
  absl::Status count(const ShardedAdamW::Update& u, int64_t max_consecutive_skips,
                     const char* what);
  void save(std::map<std::string, double>* scalars) const;
  void restore(const std::map<std::string, double>& scalars);
};

}  // namespace flywheel::trainer
