// Attention of many query tokens per row (a prefill, or a forward without gradients) on the CPU,
// by chunks of query tokens.
//
// The batched form (every row's scores [kv_heads, groups * T, L] at once, masked, soft-maxed)
// allocates score tensors of B * heads * T * L floats: 400 MB per layer for 8 rows of 1024
// tokens, each allocation fresh pages from the kernel (page faults were a quarter of such a
// prefill), and it runs on ATen's one thread. Here each task is one row and one chunk of its
// query tokens, whose scores stay within a budget (4 MiB by default), against only the keys that
// chunk may read (up to the last one its mask allows: a causal prefill skips the upper triangle),
// with the tasks spread over a WorkerPool's threads. The arithmetic is the batched form's
// (LibTorch matmul, float32 softmax), so results match it to float32 rounding (sums over fewer
// masked keys, in another order).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "flywheel/model/cpu/worker_pool.h"

namespace flywheel::model {

struct PrefillAttentionInputs {
  at::Tensor q;             // [B, T, heads, head_dim], RoPE applied
  at::Tensor keys, values;  // [B, kv_heads, L, head_dim] (views allowed), of q's dtype
  at::Tensor mask;          // [B, T, L] bool: query (b, t) may read key j
  double scale = 1;         // applied to the scores (1 / sqrt(head_dim))
};

struct PrefillAttentionOptions {
  int64_t chunk_scores = int64_t{1} << 20;  // most float32 scores a task holds at once (>= 1)
  // Tasks on its threads where ATen runs on one (at::get_num_threads() == 1, as flywheel's
  // thread layouts set it beside the pool); null, or ATen on more: one after another.
  WorkerPool* pool = nullptr;
};

// [B, T, heads * head_dim] of q's dtype. Query head h reads kv head h / (heads / kv_heads). A query
// whose mask allows no key gets NaN, as the batched softmax gives it. Throws c10::Error on
// inconsistent shapes.
at::Tensor prefill_attention(const PrefillAttentionInputs& inputs,
                             const PrefillAttentionOptions& options = {});

}  // namespace flywheel::model
