// `dpo:` — preference optimisation (`flywheel dpo`): the loss of the DPO family, its reference,
// the pairs' record keys, batches and held-out evaluation.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct DpoOptions {
  std::string loss = "sigmoid";  // sigmoid | ipo | hinge | simpo
  double beta = 0.1;
  double label_smoothing = 0;  // sigmoid and simpo
  double simpo_gamma = 0.5;
  double rpo_alpha = 0;        // weight of the chosen response's NLL per token (RPO); 0 = off
  std::string reference_path;  // "" = model.path (the initial policy)
  int64_t batch_size = 16;     // pairs per optimizer step, all ranks together
  int64_t eval_every = 0;      // steps between held-out evaluations; 0 = at the end
};

void bind_options(FieldBinder& b, DpoOptions& o);

}  // namespace flywheel::core
