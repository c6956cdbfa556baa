#include "flywheel/core/options/model_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<Dtype>> choice_names(Dtype) {
  static constexpr ChoiceName<Dtype> kNames[] = {{Dtype::kFloat32, "float32"},
                                                 {Dtype::kBFloat16, "bfloat16"},
                                                 {Dtype::kFloat16, "float16"},
                                                 {Dtype::kAuto, "auto"}};
  return kNames;
}

absl::Span<const ChoiceName<Device>> choice_names(Device) {
  static constexpr ChoiceName<Device> kNames[] = {
      {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}, {Device::kAuto, "auto"}};
  return kNames;
}

void bind_options(FieldBinder& b, ModelOptions& o) {
  b.field("path", &o.path,
          FieldInfo("Hugging Face checkpoint directory of the policy (config.json, *.safetensors). "
                    "Empty: random initialisation, for toy runs."));
  b.field("reference_path", &o.reference_path,
          FieldInfo("Frozen reference model for the KL term. Empty: the initial policy weights."));
  b.field("critic_path", &o.critic_path,
          FieldInfo("Critic checkpoint (PPO with GAE). Empty: initialised from `path`."));
  b.choice("dtype", &o.dtype,
           FieldInfo("Compute dtype of the rollout engines (and of the weights learners publish). "
                     "auto: bfloat16 on cuda or on a CPU with native bf16 (AVX512-BF16 or "
                     "AMX-BF16), float32 otherwise; each process decides on its own CPU. Norms and "
                     "softmax always accumulate in float32."));
  b.choice("device", &o.device,
           FieldInfo("Device for learners and rollout engines; auto picks cuda when available."));
  b.field("max_seq_len", &o.max_seq_len,
          FieldInfo("Maximum prompt + response tokens of one sequence.").min(1));
  b.field("gradient_checkpointing", &o.gradient_checkpointing,
          FieldInfo("Recompute activations in the backward pass to save memory."));
}

bool on_cuda(Device device, int cuda_devices) {
  return device == Device::kCuda || (device == Device::kAuto && cuda_devices > 0);
}

absl::Status ModelOptions::validate() const {
  if (dtype == Dtype::kFloat16 && device == Device::kCpu) {
    return absl::InvalidArgumentError(
        "dtype: float16 is not supported on cpu; use float32 or bfloat16");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
