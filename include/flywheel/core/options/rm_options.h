// `rm:` — reward-model training (`flywheel rm`): Bradley-Terry on preference pairs, or
// (`flywheel rm --process`) a process reward model on step-labelled completions.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct RmOptions {
  double center_coefficient = 0;  // weight of (r_chosen + r_rejected)^2
  int64_t batch_size = 16;        // pairs per optimizer step, all ranks together
  int64_t eval_every = 0;         // steps between held-out evaluations; 0 = at the end
  // --process: the record keys of the steps and their labels, and what follows every step.
  std::string steps_key = "completions";
  std::string labels_key = "labels";
  std::string separator = "\n";
};

void bind_options(FieldBinder& b, RmOptions& o);

}  // namespace flywheel::core
