#include "top_p_cut.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "flywheel/model/cpu/poly_exp.h"

namespace flywheel::rollout {
namespace {

// Below this many nats a probability is taken as 0: where poly_exp's range ends (exp(-87) ~
// 1.6e-38, near float32's smallest normal number).
constexpr float kZeroBelow = -model::kPolyExpMin;

// e[i] = exp(row[i] - log_total), each token's probability, and bucket[i] its distance from
// probability 1 in 1 / per_nat nats (clamped to [0, last]: -inf logits land in the
// last bucket, with e = 0). Returns the lowest bucket. One pass, written to vectorize (exp is
// poly_exp); cloned for AVX-512 and AVX2 (chosen at load time by the CPU), with SSE2 as the
// baseline.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) int probabilities_and_buckets(
    const float* row, int64_t n, float log_total, float per_nat, int last, float* e,
    uint16_t* bucket) {
  const float last_bucket = static_cast<float>(last);
  int first = last;
  for (int64_t i = 0; i < n; ++i) {
    const float d = log_total - row[i];  // >= 0 but for rounding; +inf for -inf logits
    float b = d * per_nat;
    b = b > 0.0f ? b : 0.0f;
    b = b < last_bucket ? b : last_bucket;
    const int bi = static_cast<int>(b);
    bucket[i] = static_cast<uint16_t>(bi);
    first = bi < first ? bi : first;
    float x = -d;
    x = x > -kZeroBelow ? x : -kZeroBelow;
    x = x < 1.0f ? x : 1.0f;
    e[i] = d < kZeroBelow ? model::poly_exp(x) : 0.0f;
  }
  return first;
}

}  // namespace

TopPCut::TopPCut(int64_t vocab)
    : vocab_(vocab),
      e_(static_cast<size_t>(vocab)),
      bucket_(static_cast<size_t>(vocab)),
      mass_(kBuckets),
      head_(kBuckets),
      next_(static_cast<size_t>(vocab)) {}

bool TopPCut::cut(const float* row, float log_total, double top_p) {
  if (!std::isfinite(log_total)) return false;
  // Buckets span `width` nats of log-probability below 0; everything further (-inf included)
  // shares the last one. Every token further than log(vocab / (1 - top_p)) nats has probability
  // below (1 - top_p) / vocab, so together they hold less than 1 - top_p: the crossing lies
  // within. Without a cut (top_p 1) the buckets only order the draw, and any width serves.
  const double width = top_p < 1.0 ? std::log(static_cast<double>(vocab_) / (1.0 - top_p))
                                   : std::log(static_cast<double>(vocab_)) + 16.0;
  first_ = probabilities_and_buckets(row, vocab_, log_total, static_cast<float>(kBuckets / width),
                                     kBuckets - 1, e_.data(), bucket_.data());
  std::fill(mass_.begin() + first_, mass_.end(), 0.0);
  std::fill(head_.begin() + first_, head_.end(), -1);
  for (int64_t i = 0; i < vocab_; ++i) {
    const uint16_t b = bucket_[i];
    mass_[b] += e_[i];
    next_[i] = head_[b];
    head_[b] = static_cast<int32_t>(i);
  }
  // The row's probabilities sum to 1 but for rounding; top_p is taken of their sum, in the
  // order draw() adds them up.
  double total = 0;
  for (int b = first_; b < kBuckets; ++b) total += mass_[b];
  crossing_tokens_.clear();
  kept_in_crossing_ = 0;
  if (top_p >= 1.0) {
    crossing_ = kBuckets;
    kept_mass_ = total;
    return true;
  }
  const double target = top_p * total;
  double before = 0;
  int c = first_;
  while (c < kBuckets - 1 && before + mass_[c] < target) before += mass_[c++];
  crossing_ = c;
  for (int32_t i = head_[c]; i >= 0; i = next_[i]) crossing_tokens_.emplace_back(row[i], i);
  std::sort(crossing_tokens_.begin(), crossing_tokens_.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  while (kept_in_crossing_ < crossing_tokens_.size() && before < target) {
    before += e_[crossing_tokens_[kept_in_crossing_++].second];
  }
  kept_mass_ = before;
  return true;
}

void TopPCut::drop_from(float* row) const {
  if (crossing_ >= kBuckets) return;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t j = kept_in_crossing_; j < crossing_tokens_.size(); ++j) {
    row[crossing_tokens_[j].second] = kNegInf;
  }
  // Buckets past the crossing are dropped (-inf entries stay -inf). Without a branch: which
  // entries go is random in vocabulary order, so a branch mispredicts half the time.
  constexpr uint32_t kNegInfBits = 0xff800000u;
  const int crossing = crossing_;
  for (int64_t i = 0; i < vocab_; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &row[i], sizeof(bits));
    const uint32_t drop = 0u - static_cast<uint32_t>(bucket_[i] > crossing);
    bits = (bits & ~drop) | (kNegInfBits & drop);
    std::memcpy(&row[i], &bits, sizeof(bits));
  }
}

int64_t TopPCut::draw_in_bucket(int b, double rest) const {
  double sum = 0;
  int64_t last = -1;
  for (int32_t i = head_[b]; i >= 0; i = next_[i]) {
    sum += e_[i];
    if (e_[i] > 0) last = i;
    if (sum > rest) return i;
  }
  return last;
}

std::pair<int64_t, double> TopPCut::draw(double uniform) const {
  // Strictly below the kept mass, so that the draw lands on a token of positive probability.
  const double target = std::min(uniform * kept_mass_, kept_mass_ * (1.0 - 0x1.0p-52));
  const double log_mass = std::log(kept_mass_);
  auto drawn = [&](int64_t token) {
    return std::make_pair(token, std::log(static_cast<double>(e_[token])) - log_mass);
  };
  // The sums below are those cut() took, in the same order: they reach kept_mass_ exactly.
  double before = 0;
  const int whole = std::min(crossing_, kBuckets);
  for (int b = first_; b < whole; ++b) {
    if (before + mass_[b] > target) {
      const int64_t token = draw_in_bucket(b, target - before);
      if (token >= 0) return drawn(token);
    }
    before += mass_[b];
  }
  for (size_t j = 0; j < kept_in_crossing_; ++j) {
    const int32_t token = crossing_tokens_[j].second;
    before += e_[token];
    if (before > target) return drawn(token);
  }
  // Only by rounding (the target within an ulp of a bucket's end): the most likely token, which
  // every cut keeps.
  return drawn(std::max_element(e_.begin(), e_.end()) - e_.begin());
}

}  // namespace flywheel::rollout
