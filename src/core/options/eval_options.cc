#include "flywheel/core/options/eval_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<EvalJudge>> choice_names(EvalJudge) {
  static constexpr ChoiceName<EvalJudge> kNames[] = {
      {EvalJudge::kAuto, "auto"}, {EvalJudge::kAnswer, "answer"}, {EvalJudge::kRewards, "rewards"}};
  return kNames;
}

void bind_options(FieldBinder& b, EvalOptions& o) {
  b.field("every_steps", &o.every_steps,
          FieldInfo("Optimizer steps between held-out evaluations on data.eval_path (logged as "
                    "eval/*); 0 = only at the start and the end.")
              .min(0));
  b.field("max_new_tokens", &o.max_new_tokens,
          FieldInfo("Tokens of each completion; 0 = rollout.max_new_tokens.").min(0));
  b.field("max_prompts", &o.max_prompts,
          FieldInfo("Evaluate only the first N held-out records; 0 = all of them.").min(0));
  b.choice("judge", &o.judge,
           FieldInfo("What makes a completion correct: answer (its text, stripped of surrounding "
                     "whitespace, equals the record's data.answer_key; records without one are "
                     "skipped), rewards (the run's rewards: composite scores it, correct when >= "
                     "eval.correct_reward; every record counts), or auto (rewards when "
                     "rewards.functions is set, else answer)."));
  b.field("correct_reward", &o.correct_reward,
          FieldInfo("judge rewards: the reward at or above which a completion counts as correct."));
  b.field("samples", &o.samples,
          FieldInfo("k sampled completions per prompt besides the greedy one, for eval/pass@k "
                    "(some sample correct) and eval/mean@k (correct samples / k); 0 = greedy "
                    "only.")
              .min(0)
              .max(1024));
  b.field("temperature", &o.temperature,
          FieldInfo("Sampling temperature of the k samples.").min(1e-5));
  b.field("top_p", &o.top_p,
          FieldInfo("Nucleus sampling of the k samples (1 = off).").min(1e-6).max(1.0));
  b.field("seed", &o.seed,
          FieldInfo("Seed of the k samples (record i's samples are seeded by (seed, i)); the "
                    "same weights give the same eval/pass@k.")
              .min(0));
}

}  // namespace flywheel::core
