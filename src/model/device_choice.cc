#include "flywheel/model/device_choice.h"

#include <torch/cuda.h>

#include "flywheel/model/cpu/cpu_features.h"

namespace flywheel::model {

bool uses_cuda(core::Device device) {
  return core::on_cuda(device, static_cast<int>(torch::cuda::device_count()));
}

at::Device resolve_device(core::Device device, int cuda_index) {
  if (!uses_cuda(device)) return at::Device(at::kCPU);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_index));
}

at::ScalarType resolve_dtype(core::Dtype dtype, bool on_cuda) {
  switch (dtype) {
    case core::Dtype::kBFloat16:
      return at::kBFloat16;
    case core::Dtype::kFloat16:
      return at::kHalf;
    case core::Dtype::kAuto:
      return on_cuda || detect_cpu_features().native_bf16 ? at::kBFloat16 : at::kFloat;
    case core::Dtype::kFloat32:
      break;
  }
  return at::kFloat;
}

}  // namespace flywheel::model
