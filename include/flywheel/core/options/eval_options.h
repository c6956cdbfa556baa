// `eval:` — held-out evaluation during RL training (`flywheel train`) and `flywheel eval`.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// eval.judge (kAuto: eval/held_out_eval.h resolves it).
enum class EvalJudge { kAuto, kAnswer, kRewards };
absl::Span<const ChoiceName<EvalJudge>> choice_names(EvalJudge);

struct EvalOptions {
  int64_t every_steps = 0;     // optimizer steps between evaluations; 0 = at the start and end
  int64_t max_new_tokens = 0;  // completion length; 0 = rollout.max_new_tokens
  int64_t max_prompts = 0;     // evaluate the first N held-out records; 0 = all
  EvalJudge judge = EvalJudge::kAuto;  // auto: rewards when rewards.functions is set
  double correct_reward = 1.0;  // judge rewards: a completion is correct when its reward >= this
  int64_t samples = 0;          // k sampled completions per prompt (pass@k, mean@k); 0 = off
  double temperature = 1.0;     // of the k samples
  double top_p = 1.0;
  int64_t seed = 0;
};

void bind_options(FieldBinder& b, EvalOptions& o);

}  // namespace flywheel::core
