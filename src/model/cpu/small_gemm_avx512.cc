// AVX-512F kernels of model::small_gemm; compiled with -mavx512f -mfma (see CMakeLists.txt).
// GCC 12's intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders
// once inlined at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

#include "small_gemm_avx512_sums.inc"

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
  static float sum(Reg a) { return avx512_sum(a); }
  static __m128 sum4(Reg a, Reg b, Reg c, Reg d) { return avx512_sum4(a, b, c, d); }
  static constexpr bool kStore4 = false;  // float32 kernels never write bfloat16
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
