// The actor's total loss (ALGORITHMS.md §4.5):
//   total = pg_loss (IS-weighted) - entropy_coef * agg(H) + kl_coef * agg(KL(lp_new, lp_ref))
// with one aggregation mode and mask for all three terms; KL and entropy are never IS-weighted.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/algos/kl.h"
#include "flywheel/algos/policy_loss.h"

namespace flywheel::algos {

struct ActorLossInput {
  PolicyLossInput policy;  // logprobs, old_logprobs, advantages, mask, is_weights, agg, counts
  at::Tensor entropy;      // [B, T] per-token entropy (with gradient); undefined = no bonus
  double entropy_coef = 0;
  at::Tensor ref_logprobs;  // [B, T]; undefined = no KL term
  double kl_coef = 0;
  KlEstimator kl_estimator = KlEstimator::kK3;
};

// Runs `loss` and adds the terms. Diagnostics: the policy loss's, plus entropy and kl_loss
// (aggregated values) when present.
absl::StatusOr<LossResult> actor_loss(const PolicyLoss& loss, const ActorLossInput& input);

// advantage_mean / advantage_std over valid tokens and zero_advantage_group_fraction (groups
// whose every valid advantage is 0: no learning signal).
Diagnostics advantage_diagnostics(const at::Tensor& advantages, const at::Tensor& mask,
                                  const at::Tensor& group_ids);

}  // namespace flywheel::algos
