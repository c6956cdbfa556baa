// `model:` — the policy (and optional reference / critic) checkpoints.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// model.dtype, trainer.param_dtype, trainer.reduce_dtype (kAuto: model.dtype only;
// model::resolve_dtype).
enum class Dtype { kFloat32, kBFloat16, kFloat16, kAuto };
absl::Span<const ChoiceName<Dtype>> choice_names(Dtype);

// model.device (kAuto: model::resolve_device).
enum class Device { kCpu, kCuda, kAuto };
absl::Span<const ChoiceName<Device>> choice_names(Device);

struct ModelOptions {
  std::string path;            // Hugging Face checkpoint directory; "" = random init (toy runs)
  std::string reference_path;  // frozen reference model; "" = same weights as `path`
  std::string critic_path;     // critic (PPO with GAE); "" = initialise from `path`
  Dtype dtype = Dtype::kFloat32;
  Device device = Device::kCpu;
  int64_t max_seq_len = 4096;  // prompt + response tokens per sequence
  bool gradient_checkpointing = false;

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, ModelOptions& o);

// Whether `device` puts a process on a GPU: cuda, or auto with at least one visible
// (`cuda_devices`: the process's torch::cuda::device_count()).
bool on_cuda(Device device, int cuda_devices);

}  // namespace flywheel::core
