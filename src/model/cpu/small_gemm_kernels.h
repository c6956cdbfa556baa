// The per-ISA kernels behind model::small_gemm (small_gemm.h). Each kernels_<isa>.cc is compiled
// with its own instruction-set flags and includes nothing but this header and <immintrin.h>, so
// that no inline function of a shared header is compiled for an instruction set the running CPU
// may lack (bf16_bits.h's and poly_exp.h's functions have internal linkage: each unit keeps its
// own).
//
// Element types: the float32 kernels (run_avx512, run_avx2, attend_avx512, attend_avx2) read
// float; the bfloat16 ones read bfloat16 as uint16_t bit patterns and multiply into float32 sums,
// with AVX512-BF16's vdpbf16ps (*_avx512_bf16) or widened to float32 for AVX2's FMA (*_avx2_bf16).
#pragma once

#include <cstdint>

#include "flywheel/model/cpu/bf16_bits.h"
#include "flywheel/model/cpu/poly_exp.h"

namespace flywheel::model {
enum class GemmKernel;  // small_gemm.h
}  // namespace flywheel::model

namespace flywheel::model::gemm {

// Rows of w one tile reads; callers split w between threads in multiples of it (KernelFns::
// block_cols).
constexpr int kTileCols = 4;

// The AVX512-BF16 kernel's layout of a bfloat16 w [N, K]: panels of kPanelRows rows of w, each
// [ceil(K / 2)][kPanelRows][2], so that one 64-byte load holds the 16 rows' elements k and k + 1
// side by side, for one vdpbf16ps against a broadcast pair of x. Rows past N and the element past
// an odd K are zero. A tile reads kPanelsPerTile panels; the kernel's block_cols is their rows.
constexpr int64_t kPanelRows = 16;
constexpr int64_t kPanelsPerTile = 3;

// Elements of one panel, and of all of w's. Internal linkage, as every function here that units
// with different instruction-set flags compile.
static inline int64_t bf16_panel_elements(int64_t K) { return (K + 1) / 2 * kPanelRows * 2; }
static inline int64_t bf16_panels_elements(int64_t N, int64_t K) {
  return (N + kPanelRows - 1) / kPanelRows * bf16_panel_elements(K);
}

// Writes panels [panel_begin, panel_end) of w [N, K] (bfloat16 bits, row stride ldw) to out, the
// first of them at out. AVX512-BF16's (KernelFns::pack).
void pack_bf16_panels(const uint16_t* w, int64_t ldw, int64_t N, int64_t K, int64_t panel_begin,
                      int64_t panel_end, uint16_t* out);

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for m < M and n_begin <= n < n_end. x, w and bias
// hold the kernel's element type; the sums are written as float32 to y or, rounded to nearest
// even, as bfloat16 to y_bf16 (exactly one of them is set; float32 kernels take y).
struct Problem {
  const void* x = nullptr;  // [M, K], row stride ldx
  const void* w = nullptr;  // [N, K], row stride ldw
  const void* bias = nullptr;
  float* y = nullptr;          // [M, N], row stride ldy
  uint16_t* y_bf16 = nullptr;  // the same, bfloat16
  int64_t M = 0, K = 0, ldx = 0, ldw = 0, ldy = 0;
  int64_t N = 0;
  // AVX512-BF16 only: all of w in pack_bf16_panels's layout, or null: the kernel packs the panels
  // it reads as it goes (the same bits, one more pass over w).
  const uint16_t* w_panels = nullptr;
};

void run_avx512(const Problem& p, int64_t n_begin, int64_t n_end);
void run_avx2(const Problem& p, int64_t n_begin, int64_t n_end);
void run_avx512_bf16(const Problem& p, int64_t n_begin, int64_t n_end);
void run_avx2_bf16(const Problem& p, int64_t n_begin, int64_t n_end);

// Attention of one query token per row over its cache slot (decode_attention.h). Rows come in
// runs of consecutive rows reading one slot (at most kRunRows; run i is rows run_starts[i] ..
// run_starts[i + 1] - 1). Task t is run t / kv_heads, kv head t % kv_heads: each row's `groups`
// = heads / kv_heads query heads read that kv head's keys 0 .. lengths[row] - 1. q, keys, values
// and out hold the kernel's element type.
constexpr int64_t kRunRows = 8;
struct AttentionProblem {
  const void* q = nullptr;     // [rows, heads, head_dim]
  const void* keys = nullptr;  // [slots, kv_heads, max_len, head_dim]
  const void* values = nullptr;
  void* out = nullptr;  // [rows, heads, head_dim]
  const int64_t* slots = nullptr;
  const int64_t* lengths = nullptr;
  const int64_t* run_starts = nullptr;  // runs + 1 entries
  int64_t heads = 0, kv_heads = 0, head_dim = 0, max_len = 0;
  float scale = 1;
};

// Runs tasks [begin, end); `scratch` holds kRunRows * groups * (max(max_len, 1) + head_dim) floats
// (the scores and the sums of a task's query heads; groups = heads / kv_heads).
void attend_avx512(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch);
void attend_avx2(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch);
void attend_avx512_bf16(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch);
void attend_avx2_bf16(const AttentionProblem& p, int64_t begin, int64_t end, float* scratch);

// A kernel's projection and attention functions; both null off x86-64 (where
// resolve_gemm_kernel throws first). Defined in small_gemm.cc, which no instruction-set flag
// compiles.
struct KernelFns {
  void (*run)(const Problem&, int64_t, int64_t) = nullptr;
  void (*attend)(const AttentionProblem&, int64_t, int64_t, float*) = nullptr;
  // run's n_begin is a multiple of it (and n_end too, or N).
  int64_t block_cols = kTileCols;
  // Packs w for Problem::w_panels (pack_bf16_panels); null for kernels that read w in place.
  void (*pack)(const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t, uint16_t*) = nullptr;
};
KernelFns kernel_fns(GemmKernel kernel);

}  // namespace flywheel::model::gemm
