#include "flywheel/algos/aggregation.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::algos {

absl::StatusOr<AggMode> parse_agg_mode(const std::string& name) {
  if (name == "token-mean") return AggMode::kTokenMean;
  if (name == "token-sum") return AggMode::kTokenSum;
  if (name == "seq-mean-token-sum") return AggMode::kSeqMeanTokenSum;
  if (name == "seq-mean-token-mean") return AggMode::kSeqMeanTokenMean;
  if (name == "seq-mean-token-sum-norm") return AggMode::kSeqMeanTokenSumNorm;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown loss_agg_mode '", name,
                   "'; known: token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, "
                   "seq-mean-token-sum-norm"));
}

const char* agg_mode_name(AggMode mode) {
  switch (mode) {
    case AggMode::kTokenMean:
      return "token-mean";
    case AggMode::kTokenSum:
      return "token-sum";
    case AggMode::kSeqMeanTokenSum:
      return "seq-mean-token-sum";
    case AggMode::kSeqMeanTokenMean:
      return "seq-mean-token-mean";
    case AggMode::kSeqMeanTokenSumNorm:
      return "seq-mean-token-sum-norm";
  }
  return "?";
}

AggCounts local_counts(const at::Tensor& mask) {
  at::Tensor m = mask.to(at::kFloat);
  AggCounts c;
  c.tokens = m.sum().item<double>();
  c.sequences = (m.sum(-1) > 0).sum().item<double>();
  c.rows = static_cast<double>(m.size(0));
  return c;
}

at::Tensor aggregate(const at::Tensor& loss, const at::Tensor& mask, AggMode mode,
                     const AggCounts& counts, double norm_constant) {
  at::Tensor valid = mask.to(at::kBool);
  // where() rather than multiply: a garbage inf at a masked position must not become NaN.
  at::Tensor masked = at::where(valid, loss, at::zeros({}, loss.options()));
  auto safe = [](double d) { return d > 0 ? d : 1.0; };
  switch (mode) {
    case AggMode::kTokenMean:
      return counts.tokens > 0 ? masked.sum() / counts.tokens : masked.sum() * 0;
    case AggMode::kTokenSum:
      return masked.sum();
    case AggMode::kSeqMeanTokenSum:
      return masked.sum() / safe(counts.sequences);
    case AggMode::kSeqMeanTokenMean: {
      at::Tensor lengths = valid.sum(-1).to(loss.scalar_type()).clamp_min(1);
      return (masked.sum(-1) / lengths).sum() / safe(counts.sequences);
    }
    case AggMode::kSeqMeanTokenSumNorm:
      return masked.sum() / (safe(counts.rows) * norm_constant);
  }
  return masked.sum() * 0;
}

double masked_mean(const at::Tensor& x, const at::Tensor& mask) {
  at::Tensor valid = mask.to(at::kBool);
  const double n = valid.sum().item<double>();
  if (n == 0) return 0.0;
  return at::where(valid, x.to(at::kDouble), at::zeros({}, at::kDouble)).sum().item<double>() / n;
}

}  // namespace flywheel::algos
