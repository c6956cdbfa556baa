#include "flywheel/trainer/optimizer_options.h"

namespace flywheel::trainer {

OptimizerOptions OptimizerOptions::from_config(const core::TrainerOptions& t) {
  OptimizerOptions o;
  o.micro_batch_tokens = t.micro_batch_tokens;
  o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};
  o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};
  o.grad_clip = t.grad_clip;
  o.max_consecutive_skips = t.max_consecutive_skips;
  o.sharding = ShardingOptions::from_config(t);
  return o;
}

}  // namespace flywheel::trainer
