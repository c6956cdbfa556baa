// The per-ISA kernels behind model::small_gemm (small_gemm.h). Each kernels_<isa>.cc is compiled
// with its own instruction-set flags and includes nothing but this header and <immintrin.h>, so
// that no inline function of a shared header is compiled for an instruction set the running CPU
// may lack.
#pragma once

#include <cstdint>

namespace flywheel::model::gemm {

// Rows of w one tile reads; callers split w between threads in multiples of it.
constexpr int kTileCols = 4;

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for m < M and n_begin <= n < n_end.
struct Problem {
  const float* x = nullptr;  // [M, K], row stride ldx
  const float* w = nullptr;  // [N, K], row stride ldw
  const float* bias = nullptr;
  float* y = nullptr;  // [M, N], row stride ldy
  int64_t M = 0, K = 0, ldx = 0, ldw = 0, ldy = 0;
};

void run_avx512(const Problem& p, int64_t n_begin, int64_t n_end);
void run_avx2(const Problem& p, int64_t n_begin, int64_t n_end);

}  // namespace flywheel::model::gemm
