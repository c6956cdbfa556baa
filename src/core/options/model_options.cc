#include "flywheel/core/options/model_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, ModelOptions& o) {
  b.field("path", &o.path,
          FieldInfo("Hugging Face checkpoint directory of the policy (config.json, *.safetensors). "
                    "Empty: random initialisation, for toy runs."));
  b.field("reference_path", &o.reference_path,
          FieldInfo("Frozen reference model for the KL term. Empty: the initial policy weights."));
  b.field("critic_path", &o.critic_path,
          FieldInfo("Critic checkpoint (PPO with GAE). Empty: initialised from `path`."));
  b.field("dtype", &o.dtype,
          FieldInfo("Compute dtype of the rollout engines (and of the weights learners publish). "
                    "auto: bfloat16 on cuda or on a CPU with native bf16 (AVX512-BF16 or "
                    "AMX-BF16), float32 otherwise; each process decides on its own CPU. Norms and "
                    "softmax always accumulate in float32.")
              .one_of({"float32", "bfloat16", "float16", "auto"}));
  b.field("device", &o.device,
          FieldInfo("Device for learners and rollout engines; auto picks cuda when available.")
              .one_of({"cpu", "cuda", "auto"}));
  b.field("max_seq_len", &o.max_seq_len,
          FieldInfo("Maximum prompt + response tokens of one sequence.").min(1));
  b.field("gradient_checkpointing", &o.gradient_checkpointing,
          FieldInfo("Recompute activations in the backward pass to save memory."));
}

absl::Status ModelOptions::validate() const {
  if (dtype == "float16" && device == "cpu") {
    return absl::InvalidArgumentError(
        "dtype: float16 is not supported on cpu; use float32 or bfloat16");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
