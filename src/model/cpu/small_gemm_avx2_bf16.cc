// AVX2 + FMA kernels of model::small_gemm for bfloat16 weights and activations on CPUs without
// AVX512-BF16; compiled with -mavx2 -mfma (see CMakeLists.txt). A bfloat16 is the upper half of a
// float32, so widening costs one integer instruction per 8 elements: each load of 16 bfloat16
// splits into the even elements (shifted up) and the odd ones (the low halves masked off), and
// two FMAs add their products into 8 float32 sums: the products vdpbf16ps makes (a bfloat16
// product is exact in float32), each added with one rounding, on half the bytes of the float32
// kernel, so that decode, bound by reading the weights, runs up to twice as fast. GCC 12's
// intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders once inlined
// at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <memory>

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

#include "small_gemm_avx2_lanes.inc"

struct V : Avx2Lanes {
  using Elem = uint16_t;  // bfloat16 bits
  // 16 bfloat16 as float32: elements 0, 2, .., 14 in `even`, 1, 3, .., 15 in `odd`.
  struct In {
    Reg even, odd;
  };
  // 12 accumulators at 3 rows (below kWidenRows rows; the compiler spills some of w's 8 widened
  // registers).
  static constexpr int kRows = 3;
  static constexpr int kStep = 16;  // bfloat16 elements per load
  static In split(__m256i bits) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(-65536)))};
  }
  static In load(const uint16_t* p) {
    return split(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // The first n < 16 elements at p, zeros after them (nothing past p + n is read).
  static In load_first(const uint16_t* p, int n) {
    uint16_t part[kStep] = {};
    std::memcpy(part, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load(part);
  }
  static Reg dot(In a, In b, Reg acc) { return fma(a.odd, b.odd, fma(a.even, b.even, acc)); }
  // 8 bfloat16 at p as float32: the bits shifted into the upper half of each lane.
  static Reg widen(const uint16_t* p) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
};

#include "small_gemm_tiles.inc"

// After the tiles: it uses their Elem, to_float and put.
#include "decode_attention_tasks.inc"

// Rows of x from which run_avx2_bf16 widens x and w to float32 first and runs the float32 tiles
// on them. With few rows, reading w bounds the step and widening it in registers is free; with
// many, the 3 x 4 tile's 12 sums, w's 8 widened registers and x's 2 overflow the 16 registers and
// every row of x widens w again (gemm_bench, one thread, 64 rows: 61 GFLOP/s, where the float32
// tiles ran 88 and the widened path 65-81). flywheel generate on one thread, bfloat16: batch 8
// 207-219 tokens/s in registers against 181-189 widened, batch 16 even, batch 32 255-273 widened
// against 241-258.
constexpr int64_t kWidenRows = 16;

// rows x K bfloat16 at src (row stride ld) as float32 at dst (row stride kp, a multiple of 16),
// each 16 elements as the tiles' V::load splits them: the 8 even ones, then the 8 odd ones, and
// zeros from K to kp. The float32 tiles' 8-float steps over these rows then add the same products
// in the same order into the same lanes as the bfloat16 tiles' steps: the same bits.
void widen_rows(const uint16_t* src, int64_t rows, int64_t ld, int64_t K, int64_t kp, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = src + r * ld;
    float* out = dst + r * kp;
    for (int64_t k = 0; k < kp; k += V::kStep) {
      const V::In v =
          k + V::kStep <= K ? V::load(row + k) : V::load_first(row + k, static_cast<int>(K - k));
      _mm256_storeu_ps(out + k, v.even);
      _mm256_storeu_ps(out + k + 8, v.odd);
    }
  }
}

// Floats of x one pass widens: it stays in L2 while w's rows stream by (as the tiles' chunks).
constexpr int64_t kWideChunkFloats = int64_t{128} << 10;

void run_widened(const Problem& p, int64_t n_begin, int64_t n_end) {
  const int64_t kp = (p.K + V::kStep - 1) / V::kStep * V::kStep;
  const int64_t chunk = std::max<int64_t>(kMaxRows, kWideChunkFloats / kp / kMaxRows * kMaxRows);
  // Not zeroed: widen_rows writes every float the tiles read.
  std::unique_ptr<float[]> x_wide(new float[static_cast<size_t>(std::min(chunk, p.M) * kp)]);
  std::unique_ptr<float[]> w_wide(new float[static_cast<size_t>(kTileCols * kp)]);
  const uint16_t* bias = static_cast<const uint16_t*>(p.bias);
  for (int64_t c0 = 0; c0 < p.M; c0 += chunk) {
    const int64_t rows = std::min(chunk, p.M - c0);
    widen_rows(static_cast<const uint16_t*>(p.x) + c0 * p.ldx, rows, p.ldx, p.K, kp, x_wide.get());
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTileCols) {
      const int64_t nr = std::min<int64_t>(kTileCols, n_end - n0);
      widen_rows(static_cast<const uint16_t*>(p.w) + n0 * p.ldw, nr, p.ldw, p.K, kp, w_wide.get());
      float bias_wide[kTileCols] = {};
      for (int64_t j = 0; j < nr && bias != nullptr; ++j) bias_wide[j] = to_float(bias[n0 + j]);
      Problem q;
      q.x = x_wide.get();
      q.w = w_wide.get();
      q.bias = bias != nullptr ? bias_wide : nullptr;
      q.y = p.y != nullptr ? p.y + c0 * p.ldy + n0 : nullptr;
      q.y_bf16 = p.y_bf16 != nullptr ? p.y_bf16 + c0 * p.ldy + n0 : nullptr;
      q.M = rows;
      q.K = kp;
      q.ldx = kp;
      q.ldw = kp;
      q.ldy = p.ldy;
      run_avx2(q, 0, nr);
    }
  }
}

}  // namespace

void run_avx2_bf16(const Problem& p, int64_t n_begin, int64_t n_end) {
  if (p.M >= kWidenRows) return run_widened(p, n_begin, n_end);
  run_tiles(p, n_begin, n_end);
}

void attend_avx2_bf16(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch) {
  attend_tasks(p, begin, end, scratch);
}

}  // namespace flywheel::model::gemm
