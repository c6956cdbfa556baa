// y = x w^T + b on the CPU in float32 or bfloat16: the projections of inference, decode steps
// above all.
//
// A BLAS GEMM with few rows repacks the weight matrix on every call, which is memory-bound: at
// batch 8 OpenBLAS ran the 100M model's decode step at 1.8x batch 1's throughput, where reading
// the weights once allows 8x. These kernels read w in place (row-major [N, K], as checkpoints
// store it), tiled in registers, with AVX-512F or AVX2 + FMA chosen when the process starts; the
// rows of w are split between the threads of a WorkerPool. Each output element is summed in one
// fixed order, so results do not depend on the thread count (they differ from BLAS's in the last
// bits). bfloat16 pairs are multiplied into float32 sums, rounded to bfloat16 (or kept in float32)
// once per output: with AVX512-BF16's vdpbf16ps where the CPU has it (with AVX512-BW), else
// widened to float32 for AVX2's FMA (the same arithmetic, on half the float32 kernel's bytes).
// The AVX512-BF16 kernel reads w in panels of 16 rows (packed_weights.h) and sums each output over
// k in pairs, in order.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "flywheel/model/cpu/worker_pool.h"

namespace flywheel::model {

enum class GemmIsa {
  kAuto,    // the best this CPU has
  kAvx512,  // AVX-512F
  kAvx2,    // AVX2 + FMA
  kNone,    // neither (or not x86-64): small_linear is not available
};

// "avx512" | "avx2" | "none".
const char* gemm_isa_name(GemmIsa isa);

// The best float32 kernel this CPU (and OS) supports: kAvx512, kAvx2 or kNone.
GemmIsa detect_gemm_isa();

// Whether `isa` runs on this CPU (kAuto: whether any does).
bool gemm_isa_supported(GemmIsa isa);

// Whether this CPU multiplies bfloat16 natively: AVX512-BF16 and AVX512-BW, with the OS saving
// the AVX-512 state.
bool avx512_bf16_supported();

// Whether this CPU has a bfloat16 kernel: AVX512-BF16 (avx512_bf16_supported), or AVX2 + FMA
// widening bfloat16 to float32.
bool bf16_gemm_supported();

// Whether small_linear and decode_attention run `dtype` on this CPU: float32 with any kernel,
// bfloat16 with bf16_gemm_supported(); false for every other dtype.
bool small_gemm_supports(at::ScalarType dtype);

// The instruction set a float32 kernel call with `isa` runs (kAuto: the best); throws c10::Error
// naming `caller` when this CPU lacks it.
GemmIsa resolve_gemm_isa(GemmIsa isa, const char* caller);

// The kernels small_linear and decode_attention choose between.
enum class GemmKernel { kAvx512, kAvx2, kAvx512Bf16, kAvx2Bf16 };

// The kernel a call on `dtype` (float32 or bfloat16) with `isa` runs; throws c10::Error naming
// `caller` when this CPU lacks it. bfloat16 with kAvx512 runs AVX512-BF16, with kAvx2 the AVX2
// widening kernel, with kAuto the first of them this CPU has.
GemmKernel resolve_gemm_kernel(at::ScalarType dtype, GemmIsa isa, const char* caller);

class PackedWeights;  // packed_weights.h

struct SmallLinearOptions {
  GemmIsa isa = GemmIsa::kAuto;  // bfloat16: kAvx512 is AVX512-BF16 (resolve_gemm_kernel)
  WorkerPool* pool = nullptr;    // null: the calling thread alone
  // y's dtype: x's (Undefined) or float32 (bfloat16 inputs, e.g. logits kept unrounded).
  at::ScalarType out_dtype = at::ScalarType::Undefined;
  // AVX512-BF16: w's packed panels are kept there across calls (null: packed on every call).
  // The same bits either way.
  PackedWeights* packs = nullptr;
};

// y [M, N] = x [M, K] w^T + b: x on the CPU with contiguous rows (any M >= 0), w [N, K]
// contiguous, b [N] or undefined, all float32 or all bfloat16. Not differentiable. Throws
// c10::Error on other inputs or an instruction set this CPU lacks.
at::Tensor small_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                        const SmallLinearOptions& options = {});

}  // namespace flywheel::model
