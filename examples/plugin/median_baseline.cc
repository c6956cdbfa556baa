#include "median_baseline.h"

#include <algorithm>
#include <map>
#include <vector>

#include <ATen/ATen.h>

namespace flywheel_example {

absl::StatusOr<std::unique_ptr<flywheel::algos::AdvantageEstimator>> MedianBaseline::create(
    const flywheel::algos::EstimatorOptions&) {
  return std::unique_ptr<flywheel::algos::AdvantageEstimator>(new MedianBaseline());
}

absl::StatusOr<flywheel::algos::AdvantageResult> MedianBaseline::compute(
    const flywheel::algos::AdvantageInput& in) const {
  if (!in.scores.defined() || !in.group_ids.defined() || !in.mask.defined() ||
      in.scores.numel() != in.mask.size(0) || in.group_ids.numel() != in.mask.size(0)) {
    return absl::InvalidArgumentError("median_baseline needs scores, group_ids and a mask");
  }
  at::Tensor scores = in.scores.to(at::kDouble).contiguous();
  at::Tensor ids = in.group_ids.to(at::kLong).contiguous();
  const int64_t B = scores.numel();
  std::map<int64_t, std::vector<double>> groups;
  for (int64_t i = 0; i < B; ++i)
    groups[ids[i].item<int64_t>()].push_back(scores[i].item<double>());
  std::vector<float> advantages(B);
  for (int64_t i = 0; i < B; ++i) {
    std::vector<double> g = groups[ids[i].item<int64_t>()];
    std::sort(g.begin(), g.end());
    const size_t n = g.size();
    const double median = n % 2 ? g[n / 2] : 0.5 * (g[n / 2 - 1] + g[n / 2]);
    advantages[i] = static_cast<float>(scores[i].item<double>() - median);
  }
  at::Tensor a = at::tensor(advantages).unsqueeze(1) * in.mask.to(at::kFloat);
  return flywheel::algos::AdvantageResult{a, a};
}

}  // namespace flywheel_example
