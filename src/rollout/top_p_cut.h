// Top-p on one row of float32 logits without sorting the row, and draws among what it keeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flywheel::rollout {

// The tokens top-p keeps of one row, found in O(V) where a sort is O(V log V): tokens are
// bucketed by their log-probability, the buckets before the one where the
// cumulative probability crosses top_p are kept whole, those after it dropped whole, and only
// the crossing bucket is sorted (by value, ties by index). In descending order of value, a token
// is dropped once the probability of the tokens before it reaches top_p (the first always
// stays), as a sort of the row decides; probabilities are summed in float64, so a cut within
// float32 rounding of top_p may fall one token apart from a float32 sort.
//
// One object serves many rows of one vocabulary size, one after another (its scratch, ~10 bytes
// per token plus 48 KB, is sized once); it is not shared between threads.
class TopPCut {
 public:
  explicit TopPCut(int64_t vocab);

  // Cuts `row` ([vocab] float32, `log_total` its log-sum-exp) at `top_p` in (0, 1]; 1 keeps
  // every token. False, with nothing cut, when `log_total` is not finite (NaN or +inf in the row,
  // or no token above -inf).
  bool cut(const float* row, float log_total, double top_p);

  // Sets every token the last cut() dropped to -inf in `row`, the row given to it.
  void drop_from(float* row) const;

  // The token the last cut() kept that `uniform` (in [0, 1)) draws, by inverse CDF over the
  // kept tokens' probabilities renormalised, and its log-probability under that distribution.
  // Tokens are taken bucket by bucket (nearest the maximum first; in descending vocabulary order
  // within a bucket, by value in the crossing one), not in vocabulary order. A token of probability
  // 0
  // (-inf, or exp underflowing) is never drawn.
  std::pair<int64_t, double> draw(double uniform) const;

 private:
  static constexpr int kBuckets = 4096;

  // The first token of bucket `b` (< crossing_), in the order of its list, at which the sum of
  // e_ exceeds `rest`, or its last token of positive probability.
  int64_t draw_in_bucket(int b, double rest) const;

  int64_t vocab_;
  std::vector<float> e_;          // exp(row - log_total): each token's probability
  int first_ = 0;                 // the lowest bucket with a token
  std::vector<uint16_t> bucket_;  // each token's bucket
  std::vector<double> mass_;      // each bucket's sum of e_
  // Each bucket's tokens as a list, in descending vocabulary order: head_[b] is its first token
  // (-1: empty), next_[i] the token after i.
  std::vector<int32_t> head_, next_;
  // The crossing bucket's tokens, descending by value (ties by index); the first kept_in_crossing_
  // of them are kept.
  std::vector<std::pair<float, int32_t>> crossing_tokens_;
  int crossing_ = kBuckets;  // kBuckets: no crossing (top_p 1), every bucket kept whole
  size_t kept_in_crossing_ = 0;
  double kept_mass_ = 0;  // the sum of e_ over the kept tokens
};

}  // namespace flywheel::rollout
