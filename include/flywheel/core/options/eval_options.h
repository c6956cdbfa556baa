// `eval:` — held-out evaluation during RL training (`flywheel train`) and `flywheel eval`.
#pragma once

#include <cstdint>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct EvalOptions {
  int64_t every_steps = 0;     // optimizer steps between evaluations; 0 = at the start and end
  int64_t max_new_tokens = 0;  // greedy completion length; 0 = rollout.max_new_tokens
  int64_t max_prompts = 0;     // evaluate the first N held-out records; 0 = all
};

void bind_options(FieldBinder& b, EvalOptions& o);

}  // namespace flywheel::core
