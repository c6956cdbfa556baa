// Differentiable projections in flywheel's CPU kernels (small_gemm.h), for bfloat16 training on
// CPUs where LibTorch has no bfloat16 GEMM.
//
// Without AVX512-BF16, LibTorch 1.13 to 2.x multiply bfloat16 matrices in an emulation that runs
// at 1.6-5 GFLOP/s on an AVX2 core (benchmarks/gemm_bench), and a bfloat16 learner spent 98% of
// its step there (docs/benchmarks.md). small_gemm.h's AVX2 kernel widens bfloat16 to float32 for
// FMA and runs at the float32 tiles' rate. kernel_linear runs a projection's forward and its
// three backward products in it:
//   y  = x w^T + b   small_linear(x, w, b)
//   dx = dy w        small_linear(dy, w^T)
//   dw = dy^T x      small_linear(dy^T, x^T)
//   db = sum of dy over the rows
// Each product multiplies bfloat16 pairs into float32 sums, rounded once per output, as
// LibTorch's bfloat16 GEMM does; the transposes copy w, x and dy once per call (1/M, 1/N and 1/K
// of the product's work).
#pragma once

#include <ATen/core/Tensor.h>

#include "flywheel/model/cpu/small_gemm.h"

namespace flywheel::model {

// Whether a bfloat16 projection that LibTorch would otherwise run on the CPU (with gradients, or
// without a worker pool) runs in flywheel's kernels: on CPUs with the AVX2 bfloat16 kernel and
// without AVX512-BF16, whose bfloat16 GEMM LibTorch runs natively (oneDNN). Fixed per process.
bool bf16_projections_in_kernels();

struct KernelLinearOptions {
  GemmIsa isa = GemmIsa::kAuto;  // as SmallLinearOptions::isa
  WorkerPool* pool = nullptr;    // null: the calling thread alone
};

// y [..., N] = x [..., K] w^T + b, differentiable in x, w and b (once: no double backward). x, w
// [N, K] and b [N] (or undefined) on the CPU, all float32 or all bfloat16; the gradients have
// their input's dtype. Throws c10::Error on other inputs or an instruction set this CPU lacks.
at::Tensor kernel_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                         const KernelLinearOptions& options = {});

}  // namespace flywheel::model
