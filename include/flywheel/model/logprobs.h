// Per-token log-probabilities (and entropy) of target tokens, computed in chunks of positions so
// that peak memory is chunk_size x vocab floats rather than batch x length x vocab. The backward
// pass recomputes each chunk's logits instead of keeping them, so training has the same bound
// (a weight in another dtype is converted to float32 in blocks of at most chunk_size x vocab
// floats), besides the weight's gradient itself, which is accumulated in float32 (vocab x hidden
// floats) and returned in the weight's dtype.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "flywheel/model/cpu/worker_pool.h"

namespace flywheel::model {

struct TokenLogprobOptions {
  double temperature = 1.0;   // logits are divided by it (> 0)
  int64_t chunk_size = 1024;  // positions per chunk
  bool with_entropy = false;  // also compute the entropy of each position's distribution
};

struct TokenLogprobs {
  at::Tensor logprobs;  // float32, shape of `targets`
  at::Tensor entropy;   // float32, shape of `targets`; undefined unless with_entropy
};

// log softmax(hidden @ weight^T / temperature)[target] for every position. hidden [..., H]
// (any dtype), weight [V, H], targets [...] int64 in [0, V). Differentiable with respect to
// hidden and weight (for both outputs).
TokenLogprobs token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& targets, const TokenLogprobOptions& options = {});

// token_logprobs' log-probs (no entropy, no gradient) computed as the rollout engine computes its
// behaviour log-probs on the CPU: logits in small_gemm.h's kernel (float32 out), divided by the
// temperature in float32, minus decode_rows.h's logsumexp_rows; each position's value depends on
// that position alone. hidden [..., H] (float32 or bfloat16) with contiguous
// rows, weight [V, H] contiguous of hidden's dtype. Throws c10::Error where small_gemm_supports
// lacks the dtype.
at::Tensor engine_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, const TokenLogprobOptions& options,
                                 WorkerPool* pool);

// argmax of hidden @ weight^T at every position (the greedy next token), chunked like
// token_logprobs. hidden [..., H] -> int64 [...]. No gradient.
at::Tensor greedy_tokens(const at::Tensor& hidden, const at::Tensor& weight,
                         int64_t chunk_size = 1024);

}  // namespace flywheel::model
