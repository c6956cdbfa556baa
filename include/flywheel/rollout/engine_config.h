// EngineOptions and SamplingParams from the `rollout:` and `model:` sections of the config.
#pragma once

#include "flywheel/core/config.h"
#include "flywheel/rollout/engine.h"

namespace flywheel::rollout {

// max_slots, max_seq_len (model.max_seq_len), max_prefill_tokens, logprob_mode, weight_update
// (drain -> drain_before_update) and recompute_kv_on_update.
EngineOptions engine_options_from_config(const core::Config& config);

// temperature, top_k, top_p, min_p, max_new_tokens, stop strings and seed.
SamplingParams sampling_params_from_config(const core::Config& config);

}  // namespace flywheel::rollout
