#include "flywheel/trainer/optimizer_options.h"

#include "absl/strings/str_cat.h"

namespace flywheel::trainer {

OptimizerOptions OptimizerOptions::from_config(const core::TrainerOptions& t,
                                               const std::string& model_path) {
  OptimizerOptions o;
  o.micro_batch_tokens = t.micro_batch_tokens;
  o.shared_prefix = t.shared_prefix;
  o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};
  o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};
  o.grad_clip = t.grad_clip;
  o.max_consecutive_skips = t.max_consecutive_skips;
  o.sharding = ShardingOptions::from_config(t, model_path);
  return o;
}

PackOptions OptimizerOptions::pack_options(int64_t max_response) const {
  PackOptions o;
  o.max_tokens = micro_batch_tokens;
  o.max_response = max_response;
  o.shared_prefix = shared_prefix;
  return o;
}

absl::Status UpdateCounters::count(const ShardedAdamW::Update& u, int64_t max_consecutive_skips,
                                   const char* what) {
  ++steps;
  consecutive_skips = u.applied ? 0 : consecutive_skips + 1;
  if (consecutive_skips < max_consecutive_skips) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(consecutive_skips, " consecutive ", what,
                   " updates had a non-finite loss or gradient norm ", "(last: loss ", u.loss,
                   ", grad norm ", u.grad_norm, "); stopping (trainer.max_consecutive_skips)"));
}

void UpdateCounters::save(std::map<std::string, double>* scalars) const {
  (*scalars)["steps"] = static_cast<double>(steps);
  (*scalars)["consecutive_skips"] = static_cast<double>(consecutive_skips);
}

void UpdateCounters::restore(const std::map<std::string, double>& scalars) {
  if (scalars.count("steps")) steps = static_cast<int64_t>(scalars.at("steps"));
  if (scalars.count("consecutive_skips")) {
    consecutive_skips = static_cast<int64_t>(scalars.at("consecutive_skips"));
  }
}

}  // namespace flywheel::trainer
