#include <cmath>
#include <random>

#include <ATen/ATen.h>

#include "flywheel/algos/aggregation.h"
#include "flywheel/algos/policy_loss.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace flywheel::algos {
namespace {

using testing::expect_near;
using testing::T;

PolicyLossInput ppo_input(at::Tensor lp_new) {
  PolicyLossInput in;
  in.logprobs = lp_new;
  in.old_logprobs = at::zeros({1, 5});
  in.advantages = T({1, 1, -1, -1, -1}, {1, 5});
  in.mask = at::ones({1, 5});
  in.counts = local_counts(in.mask);
  return in;
}

TEST(PpoClipTest, ClipHigherDualClipValueAndGradient) {
  // Ratios 1.1 (inside), 1.5 (A>0 clipped high), 0.9 (inside), 0.5 (A<0 clipped low), 4.0 (A<0,
  // capped by the dual clip at c = 3).
  at::Tensor lp = at::log(T({1.1, 1.5, 0.9, 0.5, 4.0}, {1, 5})).requires_grad_(true);
  auto loss = make_ppo_clip({/*clip_low=*/0.2, /*clip_high=*/0.28, /*clip_c=*/3.0});
  auto r = (*loss)->compute(ppo_input(lp));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->loss.item<float>(), (-1.1 - 1.28 + 0.9 + 0.8 + 3.0) / 5, 1e-5);
  r->loss.backward();
  expect_near(lp.grad(), {-1.1f / 5, 0, 0.9f / 5, 0, 0});
  EXPECT_NEAR(r->diagnostics.at("pg_clipfrac"), 0.4, 1e-9);
  EXPECT_NEAR(r->diagnostics.at("pg_clipfrac_high"), 0.2, 1e-9);
  EXPECT_NEAR(r->diagnostics.at("pg_clipfrac_low"), 0.2, 1e-9);
  EXPECT_NEAR(r->diagnostics.at("pg_clipfrac_dual"), 0.2, 1e-9);
  EXPECT_NEAR(r->diagnostics.at("ratio_max"), 4.0, 1e-5);
  EXPECT_NEAR(r->diagnostics.at("ratio_min"), 0.5, 1e-6);
}

TEST(PpoClipTest, WithoutDualClipTheLargeRatioKeepsPushing) {
  at::Tensor lp = at::log(T({1.1, 1.5, 0.9, 0.5, 4.0}, {1, 5})).requires_grad_(true);
  auto r = (*make_ppo_clip({0.2, 0.28, 0.0}))->compute(ppo_input(lp));
  EXPECT_NEAR(r->loss.item<float>(), (-1.1 - 1.28 + 0.9 + 0.8 + 4.0) / 5, 1e-5);
  r->loss.backward();
  expect_near(lp.grad(), {-1.1f / 5, 0, 0.9f / 5, 0, 4.0f / 5});
}

TEST(PpoClipTest, RatiosFarOutsideTheClipRangeStayFinite) {
  at::Tensor lp = T({60, -60, 30, -30, 0}, {1, 5}).requires_grad_(true);  // log-ratios clamp to 20
  auto r = (*make_ppo_clip({0.2, 0.2, 3.0}))->compute(ppo_input(lp));
  ASSERT_TRUE(std::isfinite(r->loss.item<float>()));
  r->loss.backward();
  EXPECT_FALSE(lp.grad().isnan().any().item<bool>());
  EXPECT_EQ(lp.grad()[0][0].item<float>(), 0.0f);  // clamped log-ratio: no gradient
}

TEST(PpoClipTest, IsWeightsMultiplyTheClippedLossAndDenominatorsKeepTheMask) {
  at::Tensor lp = at::log(T({1.1, 1.5, 0.9, 0.5, 4.0}, {1, 5})).requires_grad_(true);
  PolicyLossInput in = ppo_input(lp);
  in.is_weights = T({0.5, 1, 0, 1, 1}, {1, 5});  // token 2 masked out by the correction
  auto r = (*make_ppo_clip({0.2, 0.28, 3.0}))->compute(in);
  EXPECT_NEAR(r->loss.item<float>(), (-0.55 - 1.28 + 0 + 0.8 + 3.0) / 5, 1e-5);
  r->loss.backward();
  expect_near(lp.grad(), {-0.55f / 5, 0, 0, 0, 0});
}

TEST(PpoClipTest, FullyMaskedBatchGivesZeroNotNan) {
  at::Tensor lp = at::zeros({2, 3}).requires_grad_(true);
  PolicyLossInput in;
  in.logprobs = lp;
  in.old_logprobs = at::zeros({2, 3});
  in.advantages = at::ones({2, 3});
  in.mask = at::zeros({2, 3});
  in.counts = local_counts(in.mask);
  for (AggMode mode : {AggMode::kTokenMean, AggMode::kSeqMeanTokenMean, AggMode::kSeqMeanTokenSum,
                       AggMode::kSeqMeanTokenSumNorm, AggMode::kTokenSum}) {
    in.agg = mode;
    auto r = (*make_ppo_clip({}))->compute(in);
    EXPECT_EQ(r->loss.item<float>(), 0.0f) << agg_mode_name(mode);
    r->loss.backward();
    EXPECT_EQ(lp.grad().abs().sum().item<float>(), 0.0f);
    lp.grad().zero_();
  }
}

TEST(GspoTest, SequenceRatioItsOwnClipAndSeqMeanTokenMean) {
  at::Tensor lp = T({0.1, 0.3, 0, 0.0001, -0.0001, 0.0003}, {2, 3}).requires_grad_(true);
  PolicyLossInput in;
  in.logprobs = lp;
  in.old_logprobs = at::zeros({2, 3});
  in.advantages = T({1, 1, 0, -1, -1, -1}, {2, 3});
  in.mask = T({1, 1, 0, 1, 1, 1}, {2, 3});
  in.counts = local_counts(in.mask);
  auto r = (*make_gspo({3e-4, 4e-4, 0}))->compute(in);
  ASSERT_TRUE(r.ok());
  // Row 0: s = e^0.2, clipped to 1.0004 (A > 0): l = -1.0004, no gradient.
  // Row 1: s = e^0.0001 inside the clip: l = s, gradient -A s / L_1 / N_seq = s / 6 per token.
  const double s1 = std::exp(0.0001);
  EXPECT_NEAR(r->loss.item<double>(), (-1.0004 + s1) / 2, 1e-6);
  r->loss.backward();
  const float g = s1 / 6;
  expect_near(lp.grad(), {0, 0, 0, g, g, g}, 1e-6);
}

// ALGORITHMS.md §7 / verl: a sequence's clipped flag is broadcast to its tokens and averaged over
// valid tokens; ppo_kl is the mean of old - new log-prob over valid tokens, as for ppo_clip.
TEST(GspoTest, ClipFractionIsTokenWeightedAndPpoKlIsReported) {
  PolicyLossInput in;
  in.logprobs = T({0.1, 0.3, 0, 0.0001, -0.0001, 0.0003}, {2, 3});
  in.old_logprobs = at::zeros({2, 3});
  in.advantages = T({1, 1, 0, -1, -1, -1}, {2, 3});
  in.mask = T({1, 1, 0, 1, 1, 1}, {2, 3});
  in.counts = local_counts(in.mask);
  auto r = (*make_gspo({3e-4, 4e-4, 0}))->compute(in);
  ASSERT_TRUE(r.ok());
  // Row 0 (2 valid tokens) is clipped, row 1 (3 tokens) is not: 2 / 5, not 1 / 2 sequences.
  EXPECT_NEAR(r->diagnostics.at("pg_clipfrac"), 2.0 / 5.0, 1e-9);
  ASSERT_TRUE(r->diagnostics.count("ppo_kl"));
  EXPECT_NEAR(r->diagnostics.at("ppo_kl"), -(0.1 + 0.3 + 0.0001 - 0.0001 + 0.0003) / 5, 1e-6);
}

TEST(ReinforceTest, MinusAdvantageTimesLogprob) {
  at::Tensor lp = T({-0.5, -1.0}, {1, 2}).requires_grad_(true);
  PolicyLossInput in;
  in.logprobs = lp;
  in.old_logprobs = at::zeros({1, 2});
  in.advantages = T({2, 2}, {1, 2});
  in.mask = T({1, 0}, {1, 2});
  in.counts = local_counts(in.mask);
  auto r = (*make_reinforce({}))->compute(in);
  EXPECT_NEAR(r->loss.item<float>(), 1.0, 1e-6);
  r->loss.backward();
  expect_near(lp.grad(), {-2, 0});
}

TEST(ValueLossTest, ClippedCriticLossAndGradient) {
  at::Tensor v = T({1.0, 2.0, 0.0}, {1, 3}).requires_grad_(true);
  ValueLossInput in;
  in.values = v;
  in.old_values = T({0.8, 0.5, 1.0}, {1, 3});
  in.returns = T({1.5, 1.0, 0.2}, {1, 3});
  in.mask = at::ones({1, 3});
  in.counts = local_counts(in.mask);
  in.clip = 0.5;
  LossResult r = value_loss(in);
  // Per token: 0.25 (inside), 1 (unclipped max), 0.09 (clipped max, no gradient).
  EXPECT_NEAR(r.loss.item<float>(), 0.5 * (0.25 + 1 + 0.09) / 3, 1e-6);
  r.loss.backward();
  expect_near(v.grad(), {-1.0f / 6, 1.0f / 3, 0});
  EXPECT_NEAR(r.diagnostics.at("vf_clipfrac"), 1.0 / 3, 1e-9);
}

TEST(AggregationTest, EveryModeOnHandValues) {
  // Masked entries hold garbage, including inf, which must not leak.
  at::Tensor l = T({1, 2, INFINITY, 4, NAN, 6, 7, 8, 9}, {3, 3});
  at::Tensor m = T({1, 1, 0, 1, 0, 0, 0, 0, 0}, {3, 3});  // the third row is empty
  AggCounts c = local_counts(m);
  EXPECT_EQ(c.tokens, 3);
  EXPECT_EQ(c.sequences, 2);
  EXPECT_EQ(c.rows, 3);
  EXPECT_NEAR(aggregate(l, m, AggMode::kTokenMean, c).item<float>(), 7.0 / 3, 1e-6);
  EXPECT_NEAR(aggregate(l, m, AggMode::kTokenSum, c).item<float>(), 7.0, 1e-6);
  EXPECT_NEAR(aggregate(l, m, AggMode::kSeqMeanTokenSum, c).item<float>(), 3.5, 1e-6);
  EXPECT_NEAR(aggregate(l, m, AggMode::kSeqMeanTokenMean, c).item<float>(), 2.75, 1e-6);
  EXPECT_NEAR(aggregate(l, m, AggMode::kSeqMeanTokenSumNorm, c, 4).item<float>(), 7.0 / 12, 1e-6);
  EXPECT_EQ(*parse_agg_mode("seq-mean-token-sum-norm"), AggMode::kSeqMeanTokenSumNorm);
  EXPECT_FALSE(parse_agg_mode("mean").ok());
}

// Splitting a batch into micro-batches (and ranks) with global denominators gives the same
// loss and gradient as the whole batch, for every aggregation mode and loss.
TEST(AggregationTest, MicroBatchSplitsMatchTheWholeBatch) {
  std::mt19937 rng(5);
  const int64_t B = 12, Tn = 7;
  at::manual_seed(3);
  at::Tensor lp = at::randn({B, Tn}) * 0.3 - 1;
  at::Tensor old = lp + at::randn({B, Tn}) * 0.2;
  at::Tensor adv = at::randn({B, Tn});
  at::Tensor mask = (at::rand({B, Tn}) > 0.3).to(at::kFloat);
  mask[4].zero_();  // an empty response
  for (AggMode mode : {AggMode::kTokenMean, AggMode::kTokenSum, AggMode::kSeqMeanTokenSum,
                       AggMode::kSeqMeanTokenMean, AggMode::kSeqMeanTokenSumNorm}) {
    for (const char* name : {"ppo_clip", "gspo", "reinforce"}) {
      auto loss = std::string(name) == "ppo_clip" ? make_ppo_clip({})
                  : std::string(name) == "gspo"   ? make_gspo({0.2, 0.2, 0})
                                                  : make_reinforce({});
      auto run = [&](const std::vector<std::vector<int64_t>>& parts) {
        at::Tensor x = lp.clone().requires_grad_(true);
        AggCounts total;
        for (const auto& rows : parts) {
          total += local_counts(mask.index_select(0, at::tensor(rows, at::kLong)));
        }
        double value = 0;
        for (const auto& rows : parts) {
          at::Tensor idx = at::tensor(rows, at::kLong);
          PolicyLossInput in;
          in.logprobs = x.index_select(0, idx);
          in.old_logprobs = old.index_select(0, idx);
          in.advantages = adv.index_select(0, idx);
          in.mask = mask.index_select(0, idx);
          in.agg = mode;
          in.counts = total;
          in.norm_constant = 9;
          auto r = (*loss)->compute(in);
          r->loss.backward();
          value += r->loss.item<double>();
        }
        return std::make_pair(value, x.grad().clone());
      };
      std::vector<int64_t> all(B);
      for (int64_t i = 0; i < B; ++i) all[i] = i;
      auto whole = run({all});
      std::vector<int64_t> shuffled = all;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      // Three micro-batches on each of two simulated ranks.
      std::vector<std::vector<int64_t>> parts;
      for (int p = 0; p < 6; ++p)
        parts.emplace_back(shuffled.begin() + 2 * p, shuffled.begin() + 2 * p + 2);
      auto split = run(parts);
      EXPECT_NEAR(whole.first, split.first, 1e-5) << agg_mode_name(mode) << " " << name;
      EXPECT_TRUE(at::allclose(whole.second, split.second, 1e-5, 1e-6))
          << agg_mode_name(mode) << " " << name;
    }
  }
}

}  // namespace
}  // namespace flywheel::algos
