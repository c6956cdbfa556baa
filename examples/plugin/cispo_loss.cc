#include "cispo_loss.h"

#include <ATen/ATen.h>

namespace flywheel_example {

absl::StatusOr<std::unique_ptr<flywheel::algos::PolicyLoss>> CispoLoss::create(
    const flywheel::algos::PolicyLossOptions& options) {
  if (options.clip_high < 0) return absl::InvalidArgumentError("cispo: clip_high must be >= 0");
  return std::unique_ptr<flywheel::algos::PolicyLoss>(new CispoLoss(options.clip_high));
}

absl::StatusOr<flywheel::algos::LossResult> CispoLoss::compute(
    const flywheel::algos::PolicyLossInput& in) const {
  at::Tensor lp = in.logprobs.to(at::kFloat);
  at::Tensor rho = at::exp(at::clamp(lp.detach() - in.old_logprobs.detach(), -20, 20));
  at::Tensor weight = at::clamp(rho, 0.0, 1.0 + clip_high_);
  at::Tensor l = -weight * in.advantages.detach().to(at::kFloat) * lp;
  if (in.is_weights.defined()) l = l * in.is_weights.detach();
  flywheel::algos::LossResult out;
  out.loss = flywheel::algos::aggregate(l, in.mask, in.agg, in.counts, in.norm_constant);
  out.diagnostics["pg_loss"] = out.loss.item<double>();
  out.diagnostics["cispo_clipfrac"] =
      flywheel::algos::masked_mean((rho > 1.0 + clip_high_).to(at::kFloat), in.mask);
  return out;
}

}  // namespace flywheel_example
