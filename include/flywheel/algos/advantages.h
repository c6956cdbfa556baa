// Advantage estimators (ALGORITHMS.md §1): gae, grpo, dr_grpo, rloo, reinforce_pp,
// reinforce_pp_baseline, remax, and grpo_process (GRPO with process supervision). All run without
// gradient and return [B, T] tensors that are zero at masked positions.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace flywheel::algos {

struct AdvantageInput {
  at::Tensor scores;           // [B] outcome score per response (after any shaping)
  at::Tensor token_rewards;    // [B, T] optional token-level rewards (KL-in-reward, process
                               // rewards), the score included; undefined: each score sits on
                               // its last valid token. Outcome estimators (grpo, rloo, ...) take
                               // r_i as their row sum (a row without valid tokens: its score).
  at::Tensor mask;             // [B, T] 1 = trainable token (interior zeros allowed)
  at::Tensor token_discounts;  // [B, T] optional (gae, reinforce_pp): an extra discount from
                               // valid token t to the next valid one (episodes' turn ends)
  at::Tensor values;           // [B, T] critic values at rollout time (gae only)
  at::Tensor group_ids;        // [B] int64: rows with equal ids are one prompt's group
  at::Tensor episode_ids;      // [B] int64, optional: rows with equal ids are segments of one
                               // episode (an agent's rewritten history); group estimators
                               // count each episode once, with the r_i of its last row
  at::Tensor baselines;        // [B] reward of the greedy response to the row's prompt (remax)
  at::Tensor reward_ends;      // [B, T] optional (grpo_process): 1 on the last token of every
                               // step and turn that token_rewards pays a reward at; a row's last
                               // valid token always counts (its score's rest sits there)
};

struct AdvantageResult {
  at::Tensor advantages;  // [B, T]
  at::Tensor returns;     // [B, T] (gae, reinforce_pp); otherwise equal to advantages
};

struct EstimatorOptions {
  double gamma = 1.0;       // discount (gae, reinforce_pp, grpo_process)
  double lam = 1.0;         // GAE lambda
  double eps = 1e-6;        // added to the group std (grpo)
  bool norm_by_std = true;  // grpo, grpo_process: divide by the group std (false = Dr. GRPO)
  bool whiten = true;       // gae: whiten advantages over the batch's valid tokens
};

// Scores a batch. Thread-compatible; compute() is const.
class AdvantageEstimator {
 public:
  static constexpr char kRegistryKind[] = "advantage_estimator";
  virtual ~AdvantageEstimator() = default;
  // InvalidArgument for missing or misshapen inputs (e.g. gae without values).
  virtual absl::StatusOr<AdvantageResult> compute(const AdvantageInput& input) const = 0;
  // True when compute() needs `baselines`: the rollout workers then generate one extra greedy
  // response per prompt and send its reward with the group (remax).
  virtual bool needs_greedy_baseline() const { return false; }
  // False when compute() reads token_rewards only at reward_ends, so that a per-token KL
  // penalty in the reward would be lost: Algorithm::create then refuses kl_in_reward with a KL.
  virtual bool takes_kl_in_reward() const { return true; }
};

// whiten(x; m) of §1.0: batch statistics over valid tokens, unbiased variance, eps 1e-8 inside
// the sqrt; zeros when fewer than 2 valid tokens.
at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& mask);

// Token-level rewards with score_i on the last valid token of row i (zero elsewhere).
at::Tensor scores_on_last_token(const at::Tensor& scores, const at::Tensor& mask);

// Factories of the built-ins (registered by register_algos_builtins).
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_gae(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_grpo(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_dr_grpo(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_rloo(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_reinforce_pp(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_reinforce_pp_baseline(
    const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_remax(const EstimatorOptions& o);
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_grpo_process(const EstimatorOptions& o);

}  // namespace flywheel::algos
