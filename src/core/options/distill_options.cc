#include "flywheel/core/options/distill_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, DistillOptions& o) {
  b.field("teacher_path", &o.teacher_path,
          FieldInfo("Hugging Face directory of the teacher (same tokenizer and vocabulary as the "
                    "policy; any size). Set: on-policy distillation, each sampled token's "
                    "advantage gains coef * (log pi_teacher - log pi_student), the negative "
                    "per-token reverse KL, computed on the learners. Empty: off."));
  b.field("coef", &o.coef,
          FieldInfo("Weight of the per-token reverse KL in the advantage (with the algorithm's "
                    "own advantage from the rewards added; weight the rewards 0 for pure "
                    "distillation).")
              .min(0));
}

}  // namespace flywheel::core
