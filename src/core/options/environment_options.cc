#include "flywheel/core/options/environment_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, EnvironmentOptions& o) {
  b.field("name", &o.name,
          FieldInfo("Environment registry name for multi-turn episodes (built-ins: calculator, "
                    "guess_number; plugins add more). Empty: single-turn."));
  b.field("max_turns", &o.max_turns, FieldInfo("Model turns per episode.").min(1));
  b.field("turn_max_new_tokens", &o.turn_max_new_tokens,
          FieldInfo("Tokens of one model turn; 0: only rollout.max_new_tokens, which bounds all "
                    "of an episode's tokens after the prompt, bounds it.")
              .min(0));
  b.field("max_observation_tokens", &o.max_observation_tokens,
          FieldInfo("Longest environment reply, in tokens once tokenized; a longer one ends its "
                    "episode with an error.")
              .min(1));
  b.field("step_timeout_s", &o.step_timeout_s,
          FieldInfo("Deadline of one environment step (and reset) in seconds; a step past it ends "
                    "its episode with an error.")
              .greater_than(0));
  b.field("turn_discount", &o.turn_discount,
          FieldInfo("Token-level estimators (gae, reinforce_pp, grpo_process): a turn's return "
                    "counts the next "
                    "turn's discounted by this, on top of algorithm.gamma per token; 1: no "
                    "discount between turns.")
              .greater_than(0)
              .max(1));
  b.field("params", &o.params, FieldInfo("String parameters passed to the environment."));
}

}  // namespace flywheel::core
