// Loss aggregation (ALGORITHMS.md §3): a per-token loss matrix -> a scalar, with denominators
// that are global across micro-batches and ranks.
//
// Callers compute local_counts() on every micro-batch, sum them over all micro-batches and
// ranks of one optimizer step (all-reduce), and pass that total to aggregate() for each
// micro-batch: the summed losses and gradients then do not depend on how the batch was split.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace flywheel::algos {

enum class AggMode {
  kTokenMean,           // sum m*l / N_tok
  kTokenSum,            // sum m*l
  kSeqMeanTokenSum,     // (1/N_seq) sum_i sum_t m*l
  kSeqMeanTokenMean,    // (1/N_seq) sum_i (sum_t m*l) / L_i
  kSeqMeanTokenSumNorm  // sum m*l / (B * C)   (Dr. GRPO)
};

// "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
// "seq-mean-token-sum-norm".
absl::StatusOr<AggMode> parse_agg_mode(const std::string& name);
const char* agg_mode_name(AggMode mode);

// Denominators of one optimizer step, summed over micro-batches and ranks.
struct AggCounts {
  double tokens = 0;     // N_tok: valid tokens
  double sequences = 0;  // N_seq: rows with at least one valid token
  double rows = 0;       // B: all rows, empty ones included
  AggCounts& operator+=(const AggCounts& o) {
    tokens += o.tokens;
    sequences += o.sequences;
    rows += o.rows;
    return *this;
  }
};

// Counts of one micro-batch (mask [B, T]).
AggCounts local_counts(const at::Tensor& mask);

// The scalar loss of `loss` [B, T] under `mask` (garbage at masked positions is ignored, even
// inf/NaN). `norm_constant` is C of seq-mean-token-sum-norm (the maximum response length).
// An empty denominator gives 0, never NaN.
at::Tensor aggregate(const at::Tensor& loss, const at::Tensor& mask, AggMode mode,
                     const AggCounts& counts, double norm_constant = 1.0);

// sum(m * x) / sum(m) over valid positions; 0 when there are none. No gradient needed.
double masked_mean(const at::Tensor& x, const at::Tensor& mask);

}  // namespace flywheel::algos
