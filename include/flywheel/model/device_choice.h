// The configured device and dtype choices (model.device, model.dtype, trainer.*_dtype) as
// LibTorch types, for this process.
#pragma once

#include <ATen/ATen.h>

#include "flywheel/core/options/model_options.h"

namespace flywheel::model {

// Whether `device` puts this process on a GPU: cuda, or auto with a CUDA device visible.
bool uses_cuda(core::Device device);

// CUDA device `cuda_index` when uses_cuda(device), else the CPU.
at::Device resolve_device(core::Device device, int cuda_index);

// The compute dtype of `dtype`: auto is bfloat16 when `on_cuda` or this CPU has native bf16
// (cpu_features.h), float32 otherwise.
at::ScalarType resolve_dtype(core::Dtype dtype, bool on_cuda);

}  // namespace flywheel::model
