// Attention of one new token per row over its KV-cache slot, on the CPU, in float32 or bfloat16
// (where small_gemm_supports it): the attention of a decode step.
//
// LibTorch's path copies each row's keys and values into BLAS's packed layout for two small
// batched GEMMs per layer (~25% of a float32 batch-64 decode step, on one thread). This kernel
// reads the cache in place: per row and kv head, the scores of its query heads against every key
// of the slot, a float32 softmax (maximum subtracted), and the probability-weighted sum of the
// values summed in float32, with (row, kv head) tasks split between a WorkerPool's threads.
// bfloat16 scores come from vdpbf16ps (or, without AVX512-BF16, the same products widened to
// float32), and each output is rounded to bfloat16 once. Results do
// not depend on the thread count. Rows may also be a prefill's tokens (consecutive rows of one
// slot, lengths 1, 2, ...): up to 8 of them read each block of the slot's keys together, and each
// row's result is bit for bit what it would be alone (docs/rollout.md "Equal log-probs").
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flywheel/model/cpu/small_gemm.h"

namespace flywheel::model {

struct DecodeAttentionInputs {
  at::Tensor q;                // [rows, heads, head_dim] contiguous, RoPE applied
  at::Tensor keys, values;     // [slots, kv_heads, max_len, head_dim] of q's dtype, contiguous: the
                               // cache
  std::vector<int64_t> slots;  // rows: each row's slot
  std::vector<int64_t> lengths;  // rows: row b reads keys 0 .. lengths[b] - 1 (<= max_len)
  double scale = 1;              // applied to the scores (1 / sqrt(head_dim))
};

// [rows, heads * head_dim] of q's dtype. Query head h reads kv head h / (heads / kv_heads); a row
// of length 0 gives zeros. Throws c10::Error on inconsistent inputs or where small_linear cannot
// run.
at::Tensor decode_attention(const DecodeAttentionInputs& inputs,
                            const SmallLinearOptions& options = {});

}  // namespace flywheel::model
