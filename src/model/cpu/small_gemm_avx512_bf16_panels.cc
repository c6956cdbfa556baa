// The AVX512-BF16 projection kernel of model::small_gemm (bfloat16 weights and activations);
// compiled with -mavx512f -mavx512bw -mavx512bf16 -mfma (see CMakeLists.txt).
//
// w is read in panels (small_gemm_kernels.h: 16 rows of w, each pair of k side by side), so that
// one vdpbf16ps multiplies a broadcast pair of one row of x by 16 rows of w at once and adds the
// products into 16 outputs: a tile of 8 rows of x and 3 panels keeps 24 sums in registers, loads
// 3 vectors of w and broadcasts 8 pairs of x per 24 vdpbf16ps, and writes its outputs as whole
// vectors with no lane sums. On the Zen 5 it was measured on, it ran at 94-97% of the core's
// vdpbf16ps peak at 64 rows, where reading w's rows in place (summing 32 products per lane, then
// the lanes) ran at 60-68% (docs/benchmarks.md). Each output is the sum over k's pairs in order,
// whatever the row count, the thread count and whether the panels come packed
// (Problem::w_panels) or are packed here as the kernel goes.
// GCC 12's intrinsic headers trip -Wuninitialized on their own _mm*_undefined_* placeholders once
// inlined at -O3; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <memory>

#include <immintrin.h>

#include "small_gemm_kernels.h"

namespace flywheel::model::gemm {
namespace {

constexpr int kTileRows = 8;  // 8 x 3 sums + 3 vectors of w + 1 broadcast of the 32 registers

// The pair of x at p (elements p[0] and p[1]) in every 32-bit lane.
__m512bh broadcast_pair(const uint16_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(bits));
}

// The next tile of panels (null: none), prefetched while the tiles of every row of x read the
// current one, so that weights streamed from memory arrive in cache before they are read. The
// row tile `phase` of `every` prefetches the lines phase, phase + every, ... of each panel: the
// requests spread over all of them rather than bursting in the first.
struct Ahead {
  const uint16_t* panels = nullptr;
  int64_t phase = 0, every = 1;
};

// x [MR rows from m0] times NP panels (the first at `panels`, each `panel_size` elements, their
// first row n0): outputs n0 .. n0 + 16 NP - 1 of those rows, the last panel's rows past N
// excepted. Meanwhile it prefetches its share of `ahead` (Ahead).
template <int MR, int NP>
void tile(const Problem& p, int64_t m0, int64_t n0, const uint16_t* panels, int64_t panel_size,
          const Ahead& ahead) {
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const uint16_t* x = static_cast<const uint16_t*>(p.x) + m0 * p.ldx;
  const int64_t pairs = p.K / 2;
  // One step: the NP vectors of w at pair q against each row's pair of x (pair_of(i)).
  auto step = [&](int64_t q, auto pair_of) __attribute__((always_inline)) {
    __m512bh wv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(panels + j * panel_size + q * 2 * kPanelRows);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = pair_of(i);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  };
  int64_t next = ahead.panels != nullptr ? ahead.phase : pairs;  // the next line to prefetch
  for (int64_t q = 0; q < pairs; ++q) {
    if (q == next) {
#pragma GCC unroll 4
      for (int j = 0; j < kPanelsPerTile; ++j) {
        _mm_prefetch(
            reinterpret_cast<const char*>(ahead.panels + j * panel_size + q * 2 * kPanelRows),
            _MM_HINT_T0);
      }
      next += ahead.every;
    }
    step(q, [&](int i) { return broadcast_pair(x + i * p.ldx + 2 * q); });
  }
  if (p.K % 2 != 0) {  // the last element, paired with a zero (x's next element is not read)
    step(pairs, [&](int i) { return (__m512bh)_mm512_set1_epi32(x[i * p.ldx + p.K - 1]); });
  }
  // Each panel's valid outputs (16 but in the last panel of w) and bias, as float32.
  __mmask16 valid[NP];
  __m512 bias[NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const int64_t cols = p.N - (n0 + j * kPanelRows);
    valid[j] = cols >= kPanelRows ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
    bias[j] = _mm512_setzero_ps();
    if (p.bias != nullptr) {
      // A 512-bit masked load (AVX512-BW): the 256-bit one would need AVX512-VL.
      const __m256i bits = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(
          valid[j], static_cast<const uint16_t*>(p.bias) + n0 + j * kPanelRows));
      bias[j] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const int64_t at = (m0 + i) * p.ldy + n0;
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      const __m512 y = _mm512_add_ps(acc[i][j], bias[j]);
      if (p.y != nullptr) {
        _mm512_mask_storeu_ps(p.y + at + j * kPanelRows, valid[j], y);
      } else {
        // Rounded to nearest even (vcvtneps2bf16), as c10::BFloat16 rounds.
        const __m256i bf16 = (__m256i)_mm512_cvtneps_pbh(y);
        _mm512_mask_storeu_epi16(p.y_bf16 + at + j * kPanelRows, valid[j],
                                 _mm512_castsi256_si512(bf16));
      }
    }
  }
}

// Rows 0..15 of a 16 x 16 matrix of 32-bit elements in r, its columns out: out[j] holds element
// j of every row, row c in lane c.
void transpose16(const __m512i r[16], __m512i out[16]) {
  __m512i a[16], b[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per 128-bit block: rows 2i, 2i + 1 interleaved
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // b[4i + e], block L: element 4L + e of rows 4i .. 4i + 3
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {  // the 4 x 4 blocks of 128 bits transposed
    const __m512i c0 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0x44);
    const __m512i c1 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0xEE);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0xEE);
    out[e] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    out[4 + e] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    out[8 + e] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    out[12 + e] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

using TileFn = void (*)(const Problem&, int64_t, int64_t, const uint16_t*, int64_t, const Ahead&);

template <int MR>
TileFn tile_for(int np) {
  static_assert(kPanelsPerTile == 3, "tile_for lists NP = 1..3");
  constexpr TileFn fns[] = {tile<MR, 1>, tile<MR, 2>, tile<MR, 3>};
  return fns[np - 1];
}

TileFn tile_fn(int mr, int np) {
  static_assert(kTileRows == 8, "tile_fn lists MR = 1..8");
  constexpr TileFn (*by_rows[])(int) = {tile_for<1>, tile_for<2>, tile_for<3>, tile_for<4>,
                                        tile_for<5>, tile_for<6>, tile_for<7>, tile_for<8>};
  return by_rows[mr - 1](np);
}

}  // namespace

void pack_bf16_panels(const uint16_t* w, int64_t ldw, int64_t N, int64_t K, int64_t panel_begin,
                      int64_t panel_end, uint16_t* out) {
  const int64_t pairs = (K + 1) / 2;
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    uint16_t* dst = out + (panel - panel_begin) * bf16_panel_elements(K);
    // 16 pairs of k (32 elements, one load per row) at a time: the rows' pairs as 32-bit elements
    // of a 16 x 16 matrix, transposed so that each pair of k holds the 16 rows' pairs.
    for (int64_t q0 = 0; q0 < pairs; q0 += 16) {
      const int64_t k0 = 2 * q0;
      const __mmask32 keep =
          K - k0 >= 32 ? __mmask32(0xFFFFFFFF) : __mmask32((uint64_t{1} << (K - k0)) - 1);
      __m512i rows[16], cols[16];
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) {
        const int64_t n = panel * kPanelRows + c;
        rows[c] = n < N ? _mm512_maskz_loadu_epi16(keep, w + n * ldw + k0) : _mm512_setzero_si512();
      }
      transpose16(rows, cols);
      const int count = static_cast<int>(std::min<int64_t>(16, pairs - q0));
      for (int j = 0; j < count; ++j) {
        _mm512_storeu_si512(dst + (q0 + j) * 2 * kPanelRows, cols[j]);
      }
    }
  }
}

void run_avx512_bf16(const Problem& p, int64_t n_begin, int64_t n_end) {
  const int64_t panel_size = bf16_panel_elements(p.K);
  // Without packed panels: this call's tile of panels, packed before its rows of x read it.
  std::unique_ptr<uint16_t[]> scratch;
  if (p.w_panels == nullptr) {
    scratch.reset(new uint16_t[static_cast<size_t>(kPanelsPerTile * panel_size)]);
  }
  const auto* w = static_cast<const uint16_t*>(p.w);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kPanelsPerTile * kPanelRows) {
    const int64_t panel = n0 / kPanelRows;
    const int np = static_cast<int>(
        std::min<int64_t>(kPanelsPerTile, (n_end - n0 + kPanelRows - 1) / kPanelRows));
    const uint16_t* panels = scratch.get();
    Ahead ahead;  // the next tile's packed panels, from memory
    ahead.every = (p.M + kTileRows - 1) / kTileRows;
    if (p.w_panels != nullptr) {
      panels = p.w_panels + panel * panel_size;
      if (n0 + 2 * kPanelsPerTile * kPanelRows <= n_end) ahead.panels = panels + np * panel_size;
    } else {
      pack_bf16_panels(w, p.ldw, p.N, p.K, panel, panel + np, scratch.get());
    }
    for (int64_t m0 = 0; m0 < p.M; m0 += kTileRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kTileRows, p.M - m0));
      ahead.phase = m0 / kTileRows;
      tile_fn(mr, np)(p, m0, n0, panels, panel_size, ahead);
    }
  }
}

}  // namespace flywheel::model::gemm
