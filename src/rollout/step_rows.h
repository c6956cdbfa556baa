// The row passes of one engine step's sampling, over the [B, V] logits of B sequences: the
// temperature-scaled rows and their log-sum-exp, and the draw of the sampled rows (among each
// row's most likely tokens where that covers its truncation, else over the whole vocabulary).
// Both split rows between the model's CPU threads (`pool`; null: one range, e.g. on a GPU).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "flywheel/model/cpu/worker_pool.h"
#include "flywheel/rollout/sampling.h"

namespace flywheel::rollout {

// Rows below which a sampling pass over [rows, vocab] is not split between threads.
constexpr int64_t kMinRowsPerThread = 8;

struct ScaledRows {
  at::Tensor scale;   // [B, 1] each row's temperature (0 counts as 1)
  at::Tensor scaled;  // [B, V] logits / scale (the logits themselves when every scale is 1)
  at::Tensor norm;    // [B, 1] log-sum-exp of scaled
  at::Tensor finite;  // [B] bool: no NaN or +inf, and not every logit -inf
};

// `temperatures` has B entries.
ScaledRows scale_rows(const at::Tensor& logits, const std::vector<double>& temperatures,
                      model::WorkerPool* pool);

// Draws one token per row of `scaled` [R, V] under params[r] with uniform uniforms[r] (R
// entries each); `norm` [R, 1] is each row's log-sum-exp when known (else undefined). Sets
// `tokens` [R] (long) and `logprobs` [R] (the truncated distribution's, as sample_rows).
void draw_rows(const at::Tensor& scaled, const at::Tensor& norm,
               const std::vector<const SamplingParams*>& params,
               const std::vector<double>& uniforms, model::WorkerPool* pool, at::Tensor* tokens,
               at::Tensor* logprobs);

}  // namespace flywheel::rollout
