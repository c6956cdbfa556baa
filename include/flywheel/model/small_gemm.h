// Float32 y = x w^T + b on the CPU: the projections of inference, decode steps above all.
//
// A BLAS GEMM with few rows repacks the weight matrix on every call, which is memory-bound: at
// batch 8 OpenBLAS ran the 100M model's decode step at 1.8x batch 1's throughput, where reading
// the weights once allows 8x. These kernels read w in place (row-major [N, K], as checkpoints
// store it), tiled in registers, with AVX-512F or AVX2 + FMA chosen when the process starts; the
// rows of w are split between the threads of a WorkerPool. Each output element is summed in one
// fixed order, so results do not depend on the thread count (they differ from BLAS's in the last
// bits).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "flywheel/model/worker_pool.h"

namespace flywheel::model {

enum class GemmIsa {
  kAuto,    // the best this CPU has
  kAvx512,  // AVX-512F
  kAvx2,    // AVX2 + FMA
  kNone,    // neither (or not x86-64): small_linear is not available
};

// "avx512" | "avx2" | "none".
const char* gemm_isa_name(GemmIsa isa);

// The best kernel this CPU (and OS) supports: kAvx512, kAvx2 or kNone.
GemmIsa detect_gemm_isa();

// Whether `isa` runs on this CPU (kAuto: whether any does).
bool gemm_isa_supported(GemmIsa isa);

// The instruction set a kernel call with `isa` runs (kAuto: the best); throws c10::Error naming
// `caller` when this CPU lacks it.
GemmIsa resolve_gemm_isa(GemmIsa isa, const char* caller);

struct SmallLinearOptions {
  GemmIsa isa = GemmIsa::kAuto;
  WorkerPool* pool = nullptr;  // null: the calling thread alone
};

// y [M, N] = x [M, K] w^T + b: x float32 on the CPU with contiguous rows (any M >= 0), w float32
// [N, K] contiguous, b [N] or undefined. Not differentiable. Throws c10::Error on other inputs or
// an `isa` this CPU lacks.
at::Tensor small_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                        const SmallLinearOptions& options = {});

}  // namespace flywheel::model
