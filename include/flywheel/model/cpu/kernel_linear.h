// Differentiable projections in flywheel's CPU kernels (small_gemm.h), for bfloat16 training on
// CPUs where LibTorch has no bfloat16 GEMM.
//
// Without AVX512-BF16, LibTorch 1.13 to 2.x multiply bfloat16 matrices in an emulation that runs
// at 1.6-5 GFLOP/s on an AVX2 core (benchmarks/gemm_bench), and a bfloat16 learner spent 98% of
// its step there (docs/benchmarks.md). small_gemm.h's AVX2 kernel widens bfloat16 to float32 for
// FMA. kernel_linear runs a projection's forward and its backward products there:
//   y  = x w^T + b   small_linear(x, w, b)
//   dx = dy w        small_linear(dy, w^T)
//   dw = dy^T x      small_linear(dy^T, x^T)
//   db = sum of dy over the rows
// Each product multiplies bfloat16 pairs into float32 sums, rounded once per output, as
// LibTorch's bfloat16 GEMM does; the transposes copy w, x and dy (1/M, 1/N and 1/K of the
// product's work). A product with many rows runs instead as a float32 GEMM in LibTorch (BLAS) on
// float32 copies of its operands: a product of two bfloat16 values is exact in float32, so the
// arithmetic is the same in another order, and BLAS, which packs its operands for the caches,
// ran the learner's shapes 10-40% faster than the kernels from 512 rows (one AVX2 core).
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
  // Products of at least this many rows (M for y and dx, N for dw) run as float32 GEMMs in
  // LibTorch on float32 copies; 0: none. The kernels read their operands in place, which wins
  // for few rows (at 8 rows, 2.8x OpenBLAS's float32 in gemm_bench on 2 threads), BLAS for many.
  int64_t blas_rows = 64;
};

// y [..., N] = x [..., K] w^T + b, differentiable in x, w and b (once: no double backward). x, w
// [N, K] and b [N] (or undefined) on the CPU, all float32 or all bfloat16; the gradients have
// their input's dtype. Throws c10::Error on other inputs or an instruction set this CPU lacks.
at::Tensor kernel_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                         const KernelLinearOptions& options = {});

// a [M, K] b^T for b [N, K], without gradients, as kernel_linear runs its products: a and b
// float32 or bfloat16 CPU tensors of one dtype, possibly strided (copied where the kernels need
// contiguous rows); out_dtype a's (Undefined) or float32. BLAS copies b to float32 whole: block a
// large b (the log-prob head's backward takes 2048 vocabulary rows at a time).
at::Tensor kernel_product(const at::Tensor& a, const at::Tensor& b,
                          const KernelLinearOptions& options = {},
                          at::ScalarType out_dtype = at::ScalarType::Undefined);

}  // namespace flywheel::model
