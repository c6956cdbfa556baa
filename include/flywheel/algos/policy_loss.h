// Policy losses (ALGORITHMS.md §2): ppo_clip (clip-higher, dual clip), gspo, reinforce; and the
// clipped value loss of PPO's critic.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/algos/aggregation.h"

namespace flywheel::algos {

using Diagnostics = std::map<std::string, double>;

struct PolicyLossInput {
  at::Tensor logprobs;      // lp_new [B, T], carries the gradient
  at::Tensor old_logprobs;  // lp_old [B, T] (proximal: the trainer's recompute), detached
  at::Tensor advantages;    // [B, T]
  at::Tensor mask;          // [B, T]
  at::Tensor is_weights;    // [B, T] detached IS-correction weights; undefined = 1
  AggMode agg = AggMode::kTokenMean;
  AggCounts counts;          // global denominators (aggregation.h)
  double norm_constant = 1;  // C of seq-mean-token-sum-norm
};

struct LossResult {
  at::Tensor loss;  // scalar
  Diagnostics diagnostics;
};

struct PolicyLossOptions {
  double clip_low = 0.2;   // ratio lower bound 1 - clip_low
  double clip_high = 0.2;  // ratio upper bound 1 + clip_high
  double clip_c = 3.0;     // dual clip for negative advantages (> 1); 0 = off
};

class PolicyLoss {
 public:
  static constexpr char kRegistryKind[] = "policy_loss";
  virtual ~PolicyLoss() = default;
  virtual absl::StatusOr<LossResult> compute(const PolicyLossInput& input) const = 0;
};

absl::StatusOr<std::unique_ptr<PolicyLoss>> make_ppo_clip(const PolicyLossOptions& o);
// GSPO: sequence-level geometric-mean ratio, always aggregated seq-mean-token-mean.
absl::StatusOr<std::unique_ptr<PolicyLoss>> make_gspo(const PolicyLossOptions& o);
// REINFORCE: -A * lp_new (times the IS weight); no ratio, no clipping.
absl::StatusOr<std::unique_ptr<PolicyLoss>> make_reinforce(const PolicyLossOptions& o);

struct ValueLossInput {
  at::Tensor values;      // V_pred [B, T] with gradient
  at::Tensor old_values;  // V_old [B, T] recorded at rollout time
  at::Tensor returns;     // R [B, T]
  at::Tensor mask;
  double clip = 0.5;  // c_v
  AggMode agg = AggMode::kTokenMean;
  AggCounts counts;
  double norm_constant = 1;
};

// 0.5 * agg(max((V - R)^2, (clamp(V, V_old - c, V_old + c) - R)^2)); diagnostic vf_clipfrac.
LossResult value_loss(const ValueLossInput& input);

}  // namespace flywheel::algos
