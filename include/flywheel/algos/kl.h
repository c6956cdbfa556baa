// KL estimators, KL penalties and controllers, and the entropy bonus (ALGORITHMS.md §4).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace flywheel::algos {

enum class KlEstimator { kK1, kK2, kK3, kAbs, kK1Plus, kK3Plus };

// k1 (alias kl), k2 (mse), k3 (low_var_kl), abs, k1+, k3+.
absl::StatusOr<KlEstimator> parse_kl_estimator(const std::string& name);

// Per-token KL(lp || lp_ref) [B, T]. Gradient flows through `logprobs` only:
//   k1: x - y             (d/dx 1)
//   k2: 0.5 (x - y)^2     (d/dx x - y)
//   k3: d = clamp(y - x, -20, 20); clamp(e^d - d - 1, -10, 10)   (d/dx 1 - e^(y - x) inside)
//   abs: |x - y|          (d/dx sign(x - y))
//   k1+ / k3+: the value of k1 / k3 with the k2 gradient (straight-through).
at::Tensor kl_penalty(const at::Tensor& logprobs, const at::Tensor& ref_logprobs,
                      KlEstimator estimator);

// KL in the reward: score on the last valid token minus beta * KL(lp_old, lp_ref) at every
// valid token. No gradient.
at::Tensor kl_in_reward(const at::Tensor& scores, const at::Tensor& mask,
                        const at::Tensor& old_logprobs, const at::Tensor& ref_logprobs, double beta,
                        KlEstimator estimator);

// verl's adaptive controller: beta *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon.
class AdaptiveKlController {
 public:
  AdaptiveKlController(double beta, double target, double horizon)
      : beta_(beta), target_(target), horizon_(horizon) {}
  double beta() const { return beta_; }
  // `kl`: batch mean of each non-empty response's token-mean KL; `n_steps`: batch size.
  void update(double kl, double n_steps);

 private:
  double beta_, target_, horizon_;
};

}  // namespace flywheel::algos
