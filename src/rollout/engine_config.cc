#include "flywheel/rollout/engine_config.h"

namespace flywheel::rollout {

EngineOptions engine_options_from_config(const core::Config& config) {
  const core::RolloutOptions& r = config.rollout;
  EngineOptions o;
  o.max_slots = r.max_slots;
  o.max_seq_len = config.model.max_seq_len;
  o.max_prefill_tokens = r.max_prefill_tokens;
  o.logprob_mode = r.logprob_mode;
  o.drain_before_update = r.weight_update == core::WeightUpdate::kDrain;
  o.recompute_kv_on_update = r.recompute_kv_on_update;
  return o;
}

SamplingParams sampling_params_from_config(const core::Config& config) {
  const core::RolloutOptions& r = config.rollout;
  SamplingParams p;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.max_new_tokens = r.max_new_tokens;
  p.stop_strings = r.stop;
  p.seed = static_cast<uint64_t>(r.seed);
  return p;
}

}  // namespace flywheel::rollout
