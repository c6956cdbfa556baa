#include "flywheel/core/options/eval_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, EvalOptions& o) {
  b.field("every_steps", &o.every_steps,
          FieldInfo("Optimizer steps between held-out evaluations on data.eval_path (greedy "
                    "exact match against each record's answer, logged as eval/*); 0 = only at "
                    "the start and the end.")
              .min(0));
  b.field("max_new_tokens", &o.max_new_tokens,
          FieldInfo("Tokens of each greedy completion; 0 = rollout.max_new_tokens.").min(0));
  b.field("max_prompts", &o.max_prompts,
          FieldInfo("Evaluate only the first N held-out records; 0 = all of them.").min(0));
}

}  // namespace flywheel::core
