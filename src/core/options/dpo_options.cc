#include "flywheel/core/options/dpo_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, DpoOptions& o) {
  b.field("loss", &o.loss,
          FieldInfo("sigmoid (DPO), ipo, hinge (SLiC) or simpo (reference-free, length-"
                    "normalised); formulas in docs/algorithms.md.")
              .one_of({"sigmoid", "ipo", "hinge", "simpo"}));
  b.field("beta", &o.beta,
          FieldInfo("Scale of the implicit reward beta * (log pi - log ref); IPO's "
                    "regularisation (its target margin is 1 / (2 beta)).")
              .min(1e-9));
  b.field("label_smoothing", &o.label_smoothing,
          FieldInfo("Probability that a pair's label is flipped (conservative DPO; sigmoid and "
                    "simpo).")
              .min(0)
              .max(0.499));
  b.field("simpo_gamma", &o.simpo_gamma,
          FieldInfo("SimPO's target margin gamma between the length-normalised rewards.").min(0));
  b.field("rpo_alpha", &o.rpo_alpha,
          FieldInfo("Weight of the chosen response's NLL per token added to the loss (RPO, "
                    "TRL's rpo_alpha): keeps the chosen responses' likelihood, and the greedy "
                    "answers, from falling while the margin grows; 0 = off.")
              .min(0));
  b.field("reference_path", &o.reference_path,
          FieldInfo("Hugging Face directory of the frozen reference; empty = model.path. Its "
                    "log-probs of every pair are computed once before training (records that "
                    "carry ref_chosen_logps and ref_rejected_logps keep theirs), so no "
                    "reference model is held while training."));
  b.field("batch_size", &o.batch_size,
          FieldInfo("Pairs per optimizer step, over all learner ranks.").min(1));
  b.field("eval_every", &o.eval_every,
          FieldInfo("Steps between evaluations on data.eval_path (preference metrics, and greedy "
                    "exact-match accuracy with eval: when its records have an answer); 0 = only "
                    "at the end.")
              .min(0));
}

}  // namespace flywheel::core
