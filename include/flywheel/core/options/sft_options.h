// `sft:` — supervised fine-tuning (`flywheel sft`): batches, held-out evaluation, stopping.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct SftOptions {
  std::string response_key = "response";  // {"prompt", "response"} records; chat: last message
  int64_t batch_size = 16;                // records per optimizer step, all ranks together
  int64_t eval_every = 0;                 // steps between held-out evaluations; 0 = at the end
  int64_t eval_max_new_tokens = 32;       // greedy completion length for exact-match accuracy
  double stop_at_accuracy = 0;            // stop once held-out accuracy reaches this; 0 = off
  int64_t eval_every_near_stop = 0;       // while accuracy >= stop_at_accuracy / 2; 0 = eval_every
};

void bind_options(FieldBinder& b, SftOptions& o);

}  // namespace flywheel::core
