// `rm:` — reward-model training (`flywheel rm`): Bradley-Terry on preference pairs.
#pragma once

#include <cstdint>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct RmOptions {
  double center_coefficient = 0;  // weight of (r_chosen + r_rejected)^2
  int64_t batch_size = 16;        // pairs per optimizer step, all ranks together
  int64_t eval_every = 0;         // steps between held-out evaluations; 0 = at the end
};

void bind_options(FieldBinder& b, RmOptions& o);

}  // namespace flywheel::core
