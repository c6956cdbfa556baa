// Tensors of one model that share one block of CPU memory.
//
// A decode step reads every weight once, in a stream: at batch 1 a step is as fast as memory
// delivers the weights. Weights allocated one by one below cpu_allocator.h's huge-page threshold
// (4 MiB: a 125M model's attention projections, 75 MB in float32) sit in 4 KiB pages, where the
// stream pays a TLB miss every 4 KiB. Allocated together in one block they are one large
// allocation, which that allocator gives transparent huge pages. The same holds for a copy of every
// weight, as the engine stages a weight update: fresh 4 KiB pages cost ~11 us each to fault in.
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace flywheel::model {

// Tensors of `shapes` (in that order), uninitialised, each 64-byte aligned inside one allocation
// of `options` (a CPU device). Each tensor has its own storage and version counter (not views of
// one another), and keeps the block alive as long as it lives.
std::vector<at::Tensor> empty_in_one_block(const std::vector<std::vector<int64_t>>& shapes,
                                           const at::TensorOptions& options);

// The same, zero-filled.
std::vector<at::Tensor> zeros_in_one_block(const std::vector<std::vector<int64_t>>& shapes,
                                           const at::TensorOptions& options);

}  // namespace flywheel::model
