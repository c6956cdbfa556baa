// AVX2 + FMA kernels of model::small_gemm; compiled with -mavx2 -mfma (see CMakeLists.txt).
// GCC 12's intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders
// once inlined at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

struct V {
  using Elem = float;
  using Reg = __m256;
  using In = Reg;
  static constexpr int kRows = 3;  // 12 accumulators + 4 rows of w of the 16 registers (x reloads)
  static constexpr int kLanes = 8;
  static constexpr int kStep = kLanes;  // elements per load
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  // The first n < 8 floats at p, zeros after them (masked lanes are not read).
  static Reg load_first(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  static Reg widen(const float* p) { return load(p); }
  static Reg loadf(const float* p) { return load(p); }
  static Reg dot(In a, In b, Reg acc) { return fma(a, b, acc); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg broadcast(float x) { return _mm256_set1_ps(x); }
  static void store(float* p, Reg a) { _mm256_storeu_ps(p, a); }
  static float sum(Reg a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // The lane sums of a, b, c and d, in that order (a transposing tree of horizontal adds).
  static __m128 sum4(Reg a, Reg b, Reg c, Reg d) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  }
  static constexpr bool kStore4 = false;  // float32 kernels never write bfloat16
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
