// AVX2 + FMA kernels of model::small_gemm; compiled with -mavx2 -mfma (see CMakeLists.txt).
// GCC 12's intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders
// once inlined at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

#include "small_gemm_avx2_lanes.inc"

struct V : Avx2Lanes {
  using Elem = float;
  using In = Reg;
  static constexpr int kRows = 3;  // 12 accumulators + 4 rows of w of the 16 registers (x reloads)
  static constexpr int kStep = kLanes;  // elements per load
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  // The first n < 8 floats at p, zeros after them (masked lanes are not read).
  static Reg load_first(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  static Reg widen(const float* p) { return load(p); }
  static Reg dot(In a, In b, Reg acc) { return fma(a, b, acc); }
};

#include "small_gemm_tiles.inc"

// After the tiles: it uses their Elem, to_float and put.
#include "decode_attention_tasks.inc"

}  // namespace

void run_avx2(const Problem& p, int64_t n_begin, int64_t n_end) { run_tiles(p, n_begin, n_end); }

void attend_avx2(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch) {
  attend_tasks(p, begin, end, scratch);
}

}  // namespace flywheel::model::gemm
