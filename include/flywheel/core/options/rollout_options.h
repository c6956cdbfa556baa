// `rollout:` — the generation engine and rollout workers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"
#include "flywheel/core/options/agent_options.h"

namespace flywheel::core {

// rollout.weight_update.
enum class WeightUpdate { kInFlight, kDrain };
absl::Span<const ChoiceName<WeightUpdate>> choice_names(WeightUpdate);

// rollout.logprob_mode: which distribution the behaviour log-probs are taken from.
enum class LogprobMode { kTemperatureScaled, kProcessed };
absl::Span<const ChoiceName<LogprobMode>> choice_names(LogprobMode);

struct RolloutOptions {
  int64_t num_workers = 1;        // rollout processes started by `flywheel train`
  int64_t group_size = 8;         // completions per prompt (GRPO group)
  int64_t max_new_tokens = 1024;  // hard cap per completion
  double temperature = 1.0;       // 0 = greedy
  int64_t top_k = 0;              // 0 = off
  double top_p = 1.0;             // 1 = off
  double min_p = 0.0;             // 0 = off
  std::vector<std::string> stop;  // stop strings
  int64_t max_slots = 32;         // concurrent sequences per engine (KV-cache slots)
  int64_t seed = 1;               // base sampling seed
  WeightUpdate weight_update = WeightUpdate::kInFlight;
  bool recompute_kv_on_update = false;  // re-prefill active sequences under new weights
  LogprobMode logprob_mode = LogprobMode::kTemperatureScaled;
  int64_t max_prefill_tokens = 8192;  // prompt tokens prefilled per engine step
  // On a stop (SIGTERM / SIGINT): seconds to keep generating so that groups near their end
  // finish; then every group still generating is handed back with its samples so far.
  double finish_on_stop_s = 0;
  AgentOptions agent;  // black-box agents through the OpenAI endpoint

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, RolloutOptions& o);

}  // namespace flywheel::core
