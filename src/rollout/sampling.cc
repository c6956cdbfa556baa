#include "flywheel/rollout/sampling.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::rollout {

absl::Status SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (temperature > 0 && temperature < kMinTemperature) {
    // logits / temperature would overflow float32 (or the temperature itself underflow).
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be 0 (greedy) or >= ", kMinTemperature, ", got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0 && min_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  for (const std::string& s : stop_strings) {
    if (s.empty()) return absl::InvalidArgumentError("stop strings must not be empty");
  }
  return absl::OkStatus();
}

void truncate_logits(at::Tensor& scaled, const SamplingParams& params) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t vocab = scaled.size(-1);
  if (params.top_k > 0 && params.top_k < vocab) {
    at::Tensor kth = std::get<0>(at::topk(scaled, params.top_k)).narrow(-1, params.top_k - 1, 1);
    scaled.masked_fill_(scaled < kth, kNegInf);
  }
  if (params.top_p < 1.0) {
    auto [sorted, order] = at::sort(scaled, /*dim=*/-1, /*descending=*/true);
    at::Tensor cumulative = at::softmax(sorted, -1).cumsum(-1);
    // Drop a token when the tokens before it already reach top_p (the crossing token stays).
    at::Tensor before = cumulative - at::softmax(sorted, -1);
    at::Tensor drop_sorted = before >= params.top_p;
    drop_sorted.narrow(-1, 0, 1).fill_(false);
    at::Tensor drop = at::zeros_like(drop_sorted).scatter_(-1, order, drop_sorted);
    scaled.masked_fill_(drop, kNegInf);
  }
  if (params.min_p > 0.0) {
    at::Tensor probs = at::softmax(scaled, -1);
    at::Tensor threshold = probs.max() * params.min_p;
    scaled.masked_fill_(probs < threshold, kNegInf);
  }
}

uint64_t sample_seed(uint64_t seed, int64_t index) {
  // splitmix64 of the pair.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace flywheel::rollout
