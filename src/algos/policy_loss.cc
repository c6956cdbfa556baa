#include "flywheel/algos/policy_loss.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::algos {
namespace {

absl::Status check(const PolicyLossInput& in) {
  for (const at::Tensor* t : {&in.logprobs, &in.old_logprobs, &in.advantages, &in.mask}) {
    if (!t->defined() || t->dim() != 2 || t->sizes() != in.mask.sizes()) {
      return absl::InvalidArgumentError(
          "policy loss needs logprobs, old_logprobs, advantages and mask of one [B, T] shape");
    }
  }
  if (in.is_weights.defined() && in.is_weights.sizes() != in.mask.sizes()) {
    return absl::InvalidArgumentError("is_weights must have the mask's shape");
  }
  return absl::OkStatus();
}

at::Tensor weighted(const at::Tensor& loss, const PolicyLossInput& in) {
  return in.is_weights.defined() ? loss * in.is_weights.detach() : loss;
}

void ratio_diagnostics(const at::Tensor& rho, const at::Tensor& mask, Diagnostics* d) {
  at::Tensor valid = mask.to(at::kBool);
  if (valid.any().item<bool>()) {
    at::Tensor r = rho.detach().masked_select(valid);
    (*d)["ratio_min"] = r.min().item<double>();
    (*d)["ratio_max"] = r.max().item<double>();
    (*d)["ratio_mean"] = r.mean().item<double>();
  }
}

class PpoClip : public PolicyLoss {
 public:
  explicit PpoClip(PolicyLossOptions o) : o_(o) {}
  absl::StatusOr<LossResult> compute(const PolicyLossInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check(in));
    at::Tensor a = in.advantages.detach().to(at::kFloat);
    at::Tensor log_rho = at::clamp(in.logprobs.to(at::kFloat) - in.old_logprobs.detach(), -20, 20);
    at::Tensor rho = at::exp(log_rho);
    at::Tensor l1 = -a * rho;
    at::Tensor l2 = -a * at::clamp(rho, 1 - o_.clip_low, 1 + o_.clip_high);
    at::Tensor l = at::maximum(l1, l2);
    LossResult out;
    at::Tensor dual;
    if (o_.clip_c > 0) {
      at::Tensor l3 = -a * o_.clip_c;
      dual = (a < 0) & (l > l3);
      l = at::where(a < 0, at::minimum(l, l3), l);
    }
    out.loss = aggregate(weighted(l, in), in.mask, in.agg, in.counts, in.norm_constant);
    Diagnostics& d = out.diagnostics;
    d["pg_loss"] = out.loss.item<double>();
    d["pg_clipfrac"] = masked_mean((l2 > l1).to(at::kFloat), in.mask);
    d["pg_clipfrac_low"] = masked_mean(((rho < 1 - o_.clip_low) & (a < 0)).to(at::kFloat), in.mask);
    d["pg_clipfrac_high"] =
        masked_mean(((rho > 1 + o_.clip_high) & (a > 0)).to(at::kFloat), in.mask);
    if (dual.defined()) d["pg_clipfrac_dual"] = masked_mean(dual.to(at::kFloat), in.mask);
    at::Tensor diff = (in.old_logprobs.detach() - in.logprobs.detach()).to(at::kFloat);
    d["ppo_kl"] = masked_mean(diff, in.mask);
    d["ppo_kl_k3"] = masked_mean(at::exp(-diff) - 1 + diff, in.mask);
    ratio_diagnostics(rho, in.mask, &d);
    return out;
  }

 private:
  PolicyLossOptions o_;
};

class Gspo : public PolicyLoss {
 public:
  explicit Gspo(PolicyLossOptions o) : o_(o) {}
  absl::StatusOr<LossResult> compute(const PolicyLossInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check(in));
    at::Tensor m = in.mask.to(at::kBool);
    at::Tensor lengths = m.sum(-1).to(at::kFloat).clamp_min(1);
    at::Tensor diff = at::where(m, in.logprobs.to(at::kFloat) - in.old_logprobs.detach(), 0);
    at::Tensor log_s = at::clamp_max(diff.sum(-1) / lengths, 10.0);
    at::Tensor s = at::exp(log_s);  // [B]
    at::Tensor a = (at::where(m, in.advantages.detach().to(at::kFloat), 0).sum(-1) / lengths);
    at::Tensor l1 = -a * s;
    at::Tensor l2 = -a * at::clamp(s, 1 - o_.clip_low, 1 + o_.clip_high);
    at::Tensor per_seq = at::maximum(l1, l2);
    at::Tensor l = per_seq.unsqueeze(1).expand(in.mask.sizes());
    LossResult out;
    out.loss = aggregate(weighted(l, in), in.mask, AggMode::kSeqMeanTokenMean, in.counts);
    at::Tensor nonempty = m.any(-1);
    Diagnostics& d = out.diagnostics;
    d["pg_loss"] = out.loss.item<double>();
    // A sequence's clipped flag counts once per valid token, as verl reports it.
    at::Tensor clipped = (l2 > l1).to(at::kFloat).unsqueeze(1).expand(in.mask.sizes());
    d["pg_clipfrac"] = masked_mean(clipped, in.mask);
    d["ppo_kl"] =
        masked_mean((in.old_logprobs.detach() - in.logprobs.detach()).to(at::kFloat), in.mask);
    ratio_diagnostics(s, nonempty, &d);
    return out;
  }

 private:
  PolicyLossOptions o_;
};

class Reinforce : public PolicyLoss {
 public:
  absl::StatusOr<LossResult> compute(const PolicyLossInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check(in));
    at::Tensor l = -in.advantages.detach().to(at::kFloat) * in.logprobs.to(at::kFloat);
    LossResult out;
    out.loss = aggregate(weighted(l, in), in.mask, in.agg, in.counts, in.norm_constant);
    out.diagnostics["pg_loss"] = out.loss.item<double>();
    return out;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<PolicyLoss>> make_ppo_clip(const PolicyLossOptions& o) {
  if (o.clip_low < 0 || o.clip_low > 1 || o.clip_high < 0) {
    return absl::InvalidArgumentError("ppo_clip needs 0 <= clip_low <= 1 and clip_high >= 0");
  }
  if (o.clip_c != 0 && o.clip_c <= 1) {
    return absl::InvalidArgumentError("ppo_clip: clip_c must be > 1 (or 0 = off)");
  }
  return std::unique_ptr<PolicyLoss>(new PpoClip(o));
}

absl::StatusOr<std::unique_ptr<PolicyLoss>> make_gspo(const PolicyLossOptions& o) {
  return std::unique_ptr<PolicyLoss>(new Gspo(o));
}

absl::StatusOr<std::unique_ptr<PolicyLoss>> make_reinforce(const PolicyLossOptions&) {
  return std::unique_ptr<PolicyLoss>(new Reinforce());
}

LossResult value_loss(const ValueLossInput& in) {
  at::Tensor v = in.values.to(at::kFloat);
  at::Tensor old = in.old_values.detach().to(at::kFloat);
  at::Tensor r = in.returns.detach().to(at::kFloat);
  at::Tensor clipped = at::max(at::min(v, old + in.clip), old - in.clip);
  at::Tensor unclipped_sq = (v - r).pow(2), clipped_sq = (clipped - r).pow(2);
  at::Tensor l = at::maximum(unclipped_sq, clipped_sq);
  LossResult out;
  out.loss = 0.5 * aggregate(l, in.mask, in.agg, in.counts, in.norm_constant);
  out.diagnostics["vf_loss"] = out.loss.item<double>();
  out.diagnostics["vf_clipfrac"] = masked_mean((clipped_sq > unclipped_sq).to(at::kFloat), in.mask);
  return out;
}

}  // namespace flywheel::algos
