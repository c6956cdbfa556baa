#include "flywheel/algos/actor_loss.h"

#include <cmath>
#include <map>

#include <ATen/ATen.h>

namespace flywheel::algos {

absl::StatusOr<LossResult> actor_loss(const PolicyLoss& loss, const ActorLossInput& in) {
  absl::StatusOr<LossResult> result = loss.compute(in.policy);
  if (!result.ok()) return result.status();
  const PolicyLossInput& p = in.policy;
  if (in.entropy.defined() && in.entropy_coef != 0) {
    at::Tensor h = aggregate(in.entropy.to(at::kFloat), p.mask, p.agg, p.counts, p.norm_constant);
    result->loss = result->loss - in.entropy_coef * h;
    result->diagnostics["entropy"] = h.item<double>();
  } else if (in.entropy.defined()) {
    result->diagnostics["entropy"] =
        aggregate(in.entropy.detach().to(at::kFloat), p.mask, p.agg, p.counts, p.norm_constant)
            .item<double>();
  }
  if (in.ref_logprobs.defined() && in.kl_coef != 0) {
    at::Tensor kl = aggregate(kl_penalty(p.logprobs, in.ref_logprobs, in.kl_estimator), p.mask,
                              p.agg, p.counts, p.norm_constant);
    result->loss = result->loss + in.kl_coef * kl;
    result->diagnostics["kl_loss"] = kl.item<double>();
  }
  return result;
}

Diagnostics advantage_diagnostics(const at::Tensor& advantages, const at::Tensor& mask,
                                  const at::Tensor& group_ids) {
  Diagnostics d;
  at::Tensor m = mask.to(at::kBool);
  at::Tensor a = advantages.detach().to(at::kDouble);
  const double mean = masked_mean(a, mask);
  d["advantage_mean"] = mean;
  const double n = m.sum().item<double>();
  d["advantage_std"] =
      n > 1 ? std::sqrt(at::where(m, (a - mean).pow(2), 0).sum().item<double>() / (n - 1)) : 0.0;
  at::Tensor ids = group_ids.to(at::kLong).contiguous();
  std::map<int64_t, bool> signal;
  at::Tensor row_signal = at::where(m, a.abs(), 0).sum(-1) > 0;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    signal[ids[i].item<int64_t>()] |= row_signal[i].item<bool>();
  }
  int64_t zero = 0;
  for (const auto& [id, has] : signal) zero += !has;
  d["zero_advantage_group_fraction"] = signal.empty() ? 0.0 : double(zero) / signal.size();
  return d;
}

}  // namespace flywheel::algos
