// AVX-512F kernels of model::small_gemm; compiled with -mavx512f -mfma (see CMakeLists.txt).
// GCC 12's intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders
// once inlined at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

struct V {
  using Reg = __m512;
  static constexpr int kRows = 4;  // 16 accumulators + 4 rows of w + 1 of x of the 32 registers
  static constexpr int kLanes = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  // The first n < 16 floats at p, zeros after them (nothing past p + n is read).
  static Reg load_first(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg broadcast(float x) { return _mm512_set1_ps(x); }
  static void store(float* p, Reg a) { _mm512_storeu_ps(p, a); }
  static float sum(Reg a) {
    const __m512 halves = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, 0x4E));  // lanes 0-7 + 8-15
    __m128 s = _mm_add_ps(_mm512_castps512_ps128(halves),
                          _mm512_castps512_ps128(_mm512_shuffle_f32x4(halves, halves, 0x01)));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "decode_attention_tasks.inc"
#include "small_gemm_tiles.inc"

}  // namespace

void run_avx512(const Problem& p, int64_t n_begin, int64_t n_end) { run_tiles(p, n_begin, n_end); }

void attend_avx512(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch) {
  attend_tasks(p, begin, end, scratch);
}

}  // namespace flywheel::model::gemm
