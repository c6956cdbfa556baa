// AVX512-BF16 decode attention (decode_attention.h) for bfloat16 caches; compiled with -mavx512f
// -mavx512bw -mavx512bf16 -mfma (see CMakeLists.txt). Each step multiplies 32 bfloat16 pairs with
// one vdpbf16ps into 16 float32 sums, twice the multiply-adds of a float32 FMA on half the bytes.
// The projections' kernel is small_gemm_avx512_bf16_panels.cc's. GCC 12's intrinsic headers trip
// -Wuninitialized on their own _mm*_undefined_* placeholders once inlined at -O3; the warnings are
// about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

#include "small_gemm_avx512_sums.inc"

struct V {
  using Elem = uint16_t;  // bfloat16 bits
  using Reg = __m512;
  using In = __m512bh;
  static constexpr int kRows = 4;  // 16 accumulators + 4 rows of w + 1 of x of the 32 registers
  static constexpr int kLanes = 16;
  static constexpr int kStep = 32;  // bfloat16 elements per load
  static Reg zero() { return _mm512_setzero_ps(); }
  static In load(const uint16_t* p) { return (In)_mm512_loadu_si512(p); }
  // The first n < 32 elements at p, zeros after them (nothing past p + n is read).
  static In load_first(const uint16_t* p, int n) {
    return (In)_mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << n) - 1), p);
  }
  static Reg dot(In a, In b, Reg acc) { return _mm512_dpbf16_ps(acc, a, b); }
  // 16 bfloat16 at p as float32: the bits shifted into the upper half of each lane.
  static Reg widen(const uint16_t* p) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
  static Reg loadf(const float* p) { return _mm512_loadu_ps(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg broadcast(float x) { return _mm512_set1_ps(x); }
  static void store(float* p, Reg a) { _mm512_storeu_ps(p, a); }
  static float sum(Reg a) { return avx512_sum(a); }
  static __m128 sum4(Reg a, Reg b, Reg c, Reg d) { return avx512_sum4(a, b, c, d); }
  static constexpr bool kStore4 = true;
  // Four floats rounded to nearest even as bfloat16 (vcvtneps2bf16; its 512-bit form, so that
  // AVX512-VL is not needed).
  static void store4(uint16_t* p, __m128 y) {
    const __m256i bf16 = (__m256i)_mm512_cvtneps_pbh(_mm512_zextps128_ps512(y));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(bf16));
  }
};

#include "small_gemm_tiles.inc"

// After the tiles: it uses their Elem, to_float and put.
#include "decode_attention_tasks.inc"

}  // namespace

void attend_avx512_bf16(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch) {
  attend_tasks(p, begin, end, scratch);
}

}  // namespace flywheel::model::gemm
