// `model:` — the policy (and optional reference / critic) checkpoints.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct ModelOptions {
  std::string path;               // Hugging Face checkpoint directory; "" = random init (toy runs)
  std::string reference_path;     // frozen reference model; "" = same weights as `path`
  std::string critic_path;        // critic (PPO with GAE); "" = initialise from `path`
  std::string dtype = "float32";  // float32 | bfloat16 | float16 | auto (model::resolve_dtype)
  std::string device = "cpu";     // cpu | cuda | auto
  int64_t max_seq_len = 4096;     // prompt + response tokens per sequence
  bool gradient_checkpointing = false;

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, ModelOptions& o);

}  // namespace flywheel::core
