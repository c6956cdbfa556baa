#include "flywheel/algos/kl.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/algos/advantages.h"

namespace flywheel::algos {

absl::StatusOr<KlEstimator> parse_kl_estimator(const std::string& name) {
  if (name == "k1" || name == "kl") return KlEstimator::kK1;
  if (name == "k2" || name == "mse") return KlEstimator::kK2;
  if (name == "k3" || name == "low_var_kl") return KlEstimator::kK3;
  if (name == "abs") return KlEstimator::kAbs;
  if (name == "k1+") return KlEstimator::kK1Plus;
  if (name == "k3+") return KlEstimator::kK3Plus;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KL estimator '", name, "'; known: k1, k2, k3, abs, k1+, k3+"));
}

at::Tensor kl_penalty(const at::Tensor& logprobs, const at::Tensor& ref_logprobs,
                      KlEstimator estimator) {
  at::Tensor x = logprobs.to(at::kFloat);
  at::Tensor y = ref_logprobs.detach().to(at::kFloat);
  auto k3 = [&] {
    at::Tensor d = at::clamp(y - x, -20, 20);
    return at::clamp(at::exp(d) - d - 1, -10, 10);
  };
  auto straight_through = [&](const at::Tensor& value) {
    at::Tensor k2 = 0.5 * (x - y).pow(2);
    return value.detach() + (k2 - k2.detach());
  };
  switch (estimator) {
    case KlEstimator::kK1:
      return x - y;
    case KlEstimator::kK2:
      return 0.5 * (x - y).pow(2);
    case KlEstimator::kK3:
      return k3();
    case KlEstimator::kAbs:
      return (x - y).abs();
    case KlEstimator::kK1Plus:
      return straight_through(x - y);
    case KlEstimator::kK3Plus:
      return straight_through(k3());
  }
  return x - y;
}

at::Tensor kl_in_reward(const at::Tensor& scores, const at::Tensor& mask,
                        const at::Tensor& old_logprobs, const at::Tensor& ref_logprobs, double beta,
                        KlEstimator estimator) {
  at::NoGradGuard no_grad;
  at::Tensor kl = kl_penalty(old_logprobs, ref_logprobs, estimator);
  return scores_on_last_token(scores, mask) - beta * at::where(mask.to(at::kBool), kl, 0);
}

void AdaptiveKlController::update(double kl, double n_steps) {
  const double error = std::clamp(kl / target_ - 1.0, -0.2, 0.2);
  beta_ *= 1.0 + error * n_steps / horizon_;
}

}  // namespace flywheel::algos
