// `distill:` — on-policy distillation in `flywheel train`: a teacher scores the student's sampled
// tokens on the learners, and the per-token reverse KL enters the advantage.
#pragma once

#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct DistillOptions {
  std::string teacher_path;  // Hugging Face directory; "" = no distillation
  double coef = 1.0;         // weight of -(log pi_student - log pi_teacher) in each advantage
};

void bind_options(FieldBinder& b, DistillOptions& o);

}  // namespace flywheel::core
