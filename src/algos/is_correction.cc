#include "flywheel/algos/is_correction.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::algos {
namespace {

enum class Level { kToken, kSequence };
enum class Rule { kNone, kTruncate, kMask };

class Correction : public IsCorrection {
 public:
  Correction(Level level, Rule rule, double low, double high)
      : level_(level), rule_(rule), low_(low), high_(high) {}

  absl::StatusOr<IsResult> compute(const IsInput& in) const override {
    if (!in.old_logprobs.defined() || !in.rollout_logprobs.defined() || !in.mask.defined() ||
        in.old_logprobs.sizes() != in.mask.sizes() ||
        in.rollout_logprobs.sizes() != in.mask.sizes()) {
      return absl::InvalidArgumentError(
          "IS correction needs old_logprobs, rollout_logprobs and mask of one [B, T] shape");
    }
    at::NoGradGuard no_grad;
    at::Tensor m = in.mask.to(at::kBool);
    at::Tensor diff = at::where(
        m, in.old_logprobs.detach().to(at::kFloat) - in.rollout_logprobs.detach().to(at::kFloat),
        0);
    at::Tensor k = at::exp(at::clamp(diff, -20, 20));
    at::Tensor ratio = level_ == Level::kToken
                           ? k
                           : at::exp(at::clamp(diff.sum(-1, true), -20, 20)).expand(diff.sizes());
    IsResult out;
    at::Tensor outside;
    switch (rule_) {
      case Rule::kNone:
        break;
      case Rule::kTruncate:
        outside = ratio > high_;
        out.weights = at::where(m, at::clamp_max(ratio, high_), 0);
        break;
      case Rule::kMask:
        outside = (ratio < low_) | (ratio > high_);
        out.weights = at::where(m & outside.logical_not(), ratio, 0);
        break;
    }
    Diagnostics& d = out.diagnostics;
    at::Tensor abs_diff = diff.abs();
    d["mismatch_k1"] = masked_mean(-diff, in.mask);  // mean(lp_roll - lp_old)
    d["mismatch_k3"] = masked_mean(k - diff - 1, in.mask);
    d["logprob_abs_diff_mean"] = masked_mean(abs_diff, in.mask);
    d["logprob_abs_diff_max"] =
        m.any().item<bool>() ? abs_diff.masked_select(m).max().item<double>() : 0.0;
    if (out.weights.defined()) {
      d["is_weight_mean"] = masked_mean(out.weights, in.mask);
      d["is_weight_max"] =
          m.any().item<bool>() ? out.weights.masked_select(m).max().item<double>() : 0.0;
      d["is_corrected_fraction"] = masked_mean(outside.to(at::kFloat), in.mask);
    }
    return out;
  }

 private:
  Level level_;
  Rule rule_;
  double low_, high_;
};

double pick(double value, double fallback) {
  return value == IsOptions::kDefault ? fallback : value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IsCorrection>> make_is_correction(const std::string& name,
                                                                 const IsOptions& o) {
  std::unique_ptr<IsCorrection> c;
  if (name == "none") {
    c.reset(new Correction(Level::kToken, Rule::kNone, 0, 0));
  } else if (name == "tis") {
    c.reset(new Correction(Level::kToken, Rule::kTruncate, 0, pick(o.high, 2.0)));
  } else if (name == "seq_tis") {
    c.reset(new Correction(Level::kSequence, Rule::kTruncate, 0, pick(o.high, 5.0)));
  } else if (name == "icepop") {
    c.reset(new Correction(Level::kToken, Rule::kMask, pick(o.low, 0.5), pick(o.high, 5.0)));
  } else if (name == "seq_mask") {
    c.reset(new Correction(Level::kSequence, Rule::kMask, pick(o.low, 0.0), pick(o.high, 3.0)));
  } else if (name == "decoupled") {
    c.reset(new Correction(Level::kToken, Rule::kMask, 0.0, pick(o.high, 5.0)));
  } else {
    return absl::NotFoundError(absl::StrCat("unknown IS correction '", name, "'"));
  }
  return c;
}

}  // namespace flywheel::algos
