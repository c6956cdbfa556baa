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
  using Elem = float;
  using Reg = __m512;
  using In = Reg;
  static constexpr int kRows = 4;  // 16 accumulators + 4 rows of w + 1 of x of the 32 registers
  static constexpr int kLanes = 16;
  static constexpr int kStep = kLanes;  // elements per load
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  // The first n < 16 floats at p, zeros after them (nothing past p + n is read).
  static Reg load_first(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static Reg widen(const float* p) { return load(p); }
  static Reg loadf(const float* p) { return load(p); }
  static Reg dot(In a, In b, Reg acc) { return fma(a, b, acc); }
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
  // The lane sums of a, b, c and d, in that order: a transposing tree, 13 instructions for four
  // sums where four separate reductions take 32.
  static __m128 sum4(Reg a, Reg b, Reg c, Reg d) {
    // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3] and the same of c and d.
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    // Per 128-bit lane: that lane's sums of a, b, c and d.
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0x4E));  // + the other 256-bit half
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0xB1));  // + the other 128-bit lane
    return _mm512_castps512_ps128(s);
  }
  // Four floats as bfloat16 (float32 kernels never write bfloat16; rounded as put does).
  static void store4(uint16_t* p, __m128 y) {
    float v[4];
    _mm_storeu_ps(v, y);
    for (int j = 0; j < 4; ++j) {
      uint32_t bits;
      __builtin_memcpy(&bits, &v[j], sizeof(bits));
      p[j] = (bits & 0x7fffffffu) > 0x7f800000u
                 ? uint16_t{0x7fc0}
                 : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
};

#include "small_gemm_tiles.inc"

// After the tiles: it uses their Elem, to_float and put.
#include "decode_attention_tasks.inc"

}  // namespace

void run_avx512(const Problem& p, int64_t n_begin, int64_t n_end) { run_tiles(p, n_begin, n_end); }

void attend_avx512(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch) {
  attend_tasks(p, begin, end, scratch);
}

}  // namespace flywheel::model::gemm
