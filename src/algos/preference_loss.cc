#include "flywheel/algos/preference_loss.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::algos {
namespace {

// -(1 - eps) log sigmoid(z) - eps log sigmoid(-z), with log sigmoid(z) = -softplus(-z).
at::Tensor smoothed_sigmoid_loss(const at::Tensor& z, double eps) {
  return (1 - eps) * at::softplus(-z) + eps * at::softplus(z);
}

}  // namespace

absl::Status PreferenceLossOptions::validate() const {
  if (loss != "sigmoid" && loss != "ipo" && loss != "hinge" && loss != "simpo" &&
      loss != "bradley_terry") {
    return absl::InvalidArgumentError(
        absl::StrCat("loss: '", loss, "' is not one of sigmoid, ipo, hinge, simpo, bradley_terry"));
  }
  if (!(beta > 0)) return absl::InvalidArgumentError(absl::StrCat("beta: ", beta, " is not > 0"));
  if (!(label_smoothing >= 0 && label_smoothing < 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("label_smoothing: ", label_smoothing, " is not in [0, 0.5)"));
  }
  if (!(rpo_alpha >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rpo_alpha: ", rpo_alpha, " is negative"));
  }
  if (!(center_coefficient >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("center_coefficient: ", center_coefficient, " is negative"));
  }
  if (label_smoothing > 0 && (loss == "ipo" || loss == "hinge" || loss == "bradley_terry")) {
    return absl::InvalidArgumentError(
        absl::StrCat("label_smoothing: applies to sigmoid and simpo, not ", loss));
  }
  return absl::OkStatus();
}

absl::StatusOr<PreferenceLossResult> preference_loss(const PreferenceLossOptions& options,
                                                     const PreferencePairs& pairs) {
  if (absl::Status s = options.validate(); !s.ok()) return s;
  const at::Tensor& pc = pairs.chosen_logps;
  const at::Tensor& pr = pairs.rejected_logps;
  if (!pc.defined() || !pr.defined() || pc.dim() != 1 || !pc.sizes().equals(pr.sizes()) ||
      !pairs.chosen_tokens.defined() || !pairs.chosen_tokens.sizes().equals(pc.sizes()) ||
      !pairs.rejected_tokens.defined() || !pairs.rejected_tokens.sizes().equals(pc.sizes())) {
    return absl::InvalidArgumentError(
        "preference_loss: chosen / rejected log-probs and token counts must be [P] alike");
  }
  if (options.uses_reference() && (!pairs.chosen_ref.defined() || !pairs.rejected_ref.defined() ||
                                   !pairs.chosen_ref.sizes().equals(pc.sizes()) ||
                                   !pairs.rejected_ref.sizes().equals(pc.sizes()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("preference_loss: loss ", options.loss, " needs the reference's log-probs"));
  }
  const at::Tensor nc = pairs.chosen_tokens.to(pc.scalar_type()).clamp_min(1);
  const at::Tensor nr = pairs.rejected_tokens.to(pc.scalar_type()).clamp_min(1);
  const double beta = options.beta;
  PreferenceLossResult out;
  if (options.loss == "bradley_terry") {
    if (pairs.margins.defined() && !pairs.margins.sizes().equals(pc.sizes())) {
      return absl::InvalidArgumentError("preference_loss: margins must be [P]");
    }
    const at::Tensor z = pairs.margins.defined() ? pc - pr - pairs.margins : pc - pr;
    out.losses = smoothed_sigmoid_loss(z, 0) + options.center_coefficient * (pc + pr).pow(2);
    out.chosen_rewards = pc.detach();
    out.rejected_rewards = pr.detach();
  } else if (options.loss == "simpo") {
    const at::Tensor mc = pc / nc, mr = pr / nr;
    out.losses =
        smoothed_sigmoid_loss(beta * (mc - mr) - options.simpo_gamma, options.label_smoothing);
    out.chosen_rewards = (beta * mc).detach();
    out.rejected_rewards = (beta * mr).detach();
  } else {
    const at::Tensor& rc = pairs.chosen_ref;
    const at::Tensor& rr = pairs.rejected_ref;
    if (options.loss == "sigmoid") {
      out.losses = smoothed_sigmoid_loss(beta * ((pc - pr) - (rc - rr)), options.label_smoothing);
    } else if (options.loss == "hinge") {
      out.losses = at::relu(1 - beta * ((pc - pr) - (rc - rr)));
    } else {  // ipo
      const at::Tensor h = (pc / nc - pr / nr) - (rc / nc - rr / nr);
      out.losses = (h - 1 / (2 * beta)).pow(2);
    }
    out.chosen_rewards = (beta * (pc - rc)).detach();
    out.rejected_rewards = (beta * (pr - rr)).detach();
  }
  // RPO: the chosen response's mean NLL per token keeps its likelihood from falling.
  if (options.rpo_alpha > 0) out.losses = out.losses - options.rpo_alpha * (pc / nc);
  return out;
}

}  // namespace flywheel::algos
