#include "flywheel/algos/advantages.h"

#include <cmath>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace flywheel::algos {
namespace {

using testing::expect_near;
using testing::T;

// Rows (in order): group 7 r=1, group 3 (singleton) r=2, group 7 r=0, group 5 r=3, group 7 r=0,
// group 5 r=3, group 7 r=0 (an empty response). Groups are interleaved on purpose.
AdvantageInput grouped_input() {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 2, 0, 3, 0, 3, 0});
  in.group_ids = at::tensor(std::vector<int64_t>{7, 3, 7, 5, 7, 5, 7});
  in.mask = T({1, 1, 0,  //
               1, 0, 0,  //
               1, 1, 1,  //
               1, 0, 1,  // interior zero
               1, 0, 0,  //
               1, 1, 0,  //
               0, 0, 0},
              {7, 3});
  return in;
}

TEST(GrpoTest, GroupMeanAndUnbiasedStdWithEpsOnTheStd) {
  // Group 7 rewards {1, 0, 0, 0}: mean 0.25, unbiased std 0.5 (the empty response counts).
  auto r = make_grpo({})->get()->compute(grouped_input());
  ASSERT_TRUE(r.ok()) << r.status();
  const float a1 = 0.75 / (0.5 + 1e-6), a0 = -0.25 / (0.5 + 1e-6);
  const float single = 2 / (1 + 1e-6);         // a singleton: mean 0, std 1 (verl)
  expect_near(r->advantages, {a1,     a1, 0,   //
                              single, 0,  0,   //
                              a0,     a0, a0,  //
                              0,      0,  0,   // zero std: no signal
                              a0,     0,  0,  0, 0, 0, 0, 0, 0});
}

TEST(DrGrpoTest, NoStdDivision) {
  auto r = make_dr_grpo({})->get()->compute(grouped_input());
  ASSERT_TRUE(r.ok());
  expect_near(r->advantages, {0.75, 0.75,  0, 2, 0, 0, -0.25, -0.25, -0.25, 0, 0,
                              0,    -0.25, 0, 0, 0, 0, 0,     0,     0,     0});
}

TEST(GrpoTest, NormByStdSwitchGivesDrGrpo) {
  EstimatorOptions o;
  o.norm_by_std = false;
  auto a = make_grpo(o)->get()->compute(grouped_input());
  auto b = make_dr_grpo({})->get()->compute(grouped_input());
  EXPECT_TRUE(at::equal(a->advantages, b->advantages));
}

TEST(RlooTest, LeaveOneOutBaselineAndSingletonKeepsItsScore) {
  auto r = make_rloo({})->get()->compute(grouped_input());
  ASSERT_TRUE(r.ok());
  // n/(n-1) (r - mean) = 4/3 * {0.75, -0.25}; singleton: A = r.
  expect_near(r->advantages, {1, 1,        0, 2, 0, 0, -1.f / 3, -1.f / 3, -1.f / 3, 0, 0,
                              0, -1.f / 3, 0, 0, 0, 0, 0,        0,        0,        0});
}

// Issue 29: the segments of one agent episode (episode_ids) count once in their group's
// statistics, and each segment gets its episode's advantage.
TEST(GroupEstimatorsTest, ASegmentedEpisodeCountsOnceInItsGroup) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 1, 0, 0});  // episode 0 has two segments
  in.group_ids = at::tensor(std::vector<int64_t>{0, 0, 0, 0});
  in.episode_ids = at::tensor(std::vector<int64_t>{0, 0, 1, 2});
  in.mask = T({1, 1, 1, 1}, {4, 1});
  auto dr = make_dr_grpo({})->get()->compute(in);
  ASSERT_TRUE(dr.ok()) << dr.status();
  expect_near(dr->advantages, {2.f / 3, 2.f / 3, -1.f / 3, -1.f / 3});  // mean 1/3, not 1/2
  auto rloo = make_rloo({})->get()->compute(in);
  ASSERT_TRUE(rloo.ok()) << rloo.status();
  expect_near(rloo->advantages, {1, 1, -0.5, -0.5});  // n = 3 episodes
  in.episode_ids = at::tensor(std::vector<int64_t>{0, 1});
  EXPECT_FALSE(make_rloo({})->get()->compute(in).ok());  // one id per row
}

TEST(GaeTest, HandComputedWithoutWhitening) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1});
  in.mask = T({1, 1, 1}, {1, 3});
  in.values = T({0.5, 0.2, 0.1}, {1, 3});
  EstimatorOptions o;
  o.whiten = false;
  auto r = make_gae(o)->get()->compute(in);
  ASSERT_TRUE(r.ok()) << r.status();
  // delta_2 = 1 - 0.1; delta_1 = 0.1 - 0.2; delta_0 = 0.2 - 0.5 (gamma = lam = 1).
  expect_near(r->advantages, {0.5, 0.8, 0.9});
  expect_near(r->returns, {1, 1, 1});
}

TEST(GaeTest, SkipsInteriorMaskedPositionsAndDiscounts) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1});
  in.mask = T({1, 0, 1, 1}, {1, 4});
  in.values = T({0.5, 99, 0.2, 0.1}, {1, 4});  // 99: garbage at the tool token
  EstimatorOptions o;
  o.gamma = 0.9;
  o.lam = 0.5;
  o.whiten = false;
  auto r = make_gae(o)->get()->compute(in);
  ASSERT_TRUE(r.ok());
  // A3 = 0.9; A2 = 0.09 - 0.2 + 0.45 * 0.9 = 0.295; A0 = 0.18 - 0.5 + 0.45 * 0.295 = -0.18725.
  expect_near(r->advantages, {-0.18725, 0, 0.295, 0.9});
  expect_near(r->returns, {0.31275, 0, 0.495, 1.0});
}

TEST(GaeTest, WhitensOverValidTokensAndHandlesEdgeCases) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 0.5});
  in.mask = T({1, 1, 1, 1, 0, 0}, {2, 3});
  in.values = at::zeros({2, 3});
  auto r = make_gae({})->get()->compute(in);
  ASSERT_TRUE(r.ok());
  // Raw advantages: row 0 all 1 (gamma = lam = 1), row 1: 0.5 on its single token.
  at::Tensor raw = T({1, 1, 1, 0.5, 0, 0}, {2, 3});
  at::Tensor expected = masked_whiten(raw, in.mask) * in.mask;
  EXPECT_TRUE(at::allclose(r->advantages, expected, 0, 1e-5));
  EXPECT_NEAR(r->advantages.masked_select(in.mask.to(at::kBool)).sum().item<float>(), 0, 1e-5);
  // One token: A = r - V0. Empty response: zeros.
  AdvantageInput one;
  one.scores = at::tensor(std::vector<float>{2, 5});
  one.mask = T({1, 0, 0, 0}, {2, 2});
  one.values = T({0.5, 7, 7, 7}, {2, 2});
  EstimatorOptions no_whiten;
  no_whiten.whiten = false;
  auto o = make_gae(no_whiten)->get()->compute(one);
  expect_near(o->advantages, {1.5, 0, 0, 0});
  EXPECT_FALSE(make_gae({})->get()->compute(grouped_input()).ok());  // no values
}

TEST(MaskedWhitenTest, UnbiasedAndZerosBelowTwoTokens) {
  at::Tensor x = T({1, 2, 3, 100}, {1, 4}), m = T({1, 1, 1, 0}, {1, 4});
  // mean 2, unbiased var 1.
  expect_near(masked_whiten(x, m).narrow(1, 0, 3), {-1, 0, 1}, 1e-4);
  expect_near(masked_whiten(x, T({0, 1, 0, 0}, {1, 4})), {0, 0, 0, 0});
}

TEST(ReinforcePpTest, DiscountedReturnsSkipMaskedPositionsThenWhiten) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{2});
  in.mask = T({1, 0, 1}, {1, 3});
  EstimatorOptions o;
  o.gamma = 0.5;
  auto r = make_reinforce_pp(o)->get()->compute(in);
  ASSERT_TRUE(r.ok());
  expect_near(r->returns, {1, 0, 2});
  const float z = 0.5 / std::sqrt(0.5 + 1e-8);  // mean 1.5, unbiased var 0.5
  expect_near(r->advantages, {-z, 0, z}, 1e-4);
}

TEST(ReinforcePpTest, TokenLevelRewardsAreUsed) {
  AdvantageInput in;
  in.token_rewards = T({0.5, -0.25, 1}, {1, 3});
  in.mask = T({1, 1, 1}, {1, 3});
  auto r = make_reinforce_pp({})->get()->compute(in);
  ASSERT_TRUE(r.ok());
  expect_near(r->returns, {1.25, 0.75, 1});
}

// KL in the reward (ALGORITHMS.md §1.2, §4.2): with token-level rewards given, every outcome
// estimator's r_i is their row sum (garbage on masked positions ignored); a row without a
// trainable token keeps its score.
TEST(GroupEstimatorsTest, TakeTheRowSumOfTokenRewardsOverTheScores) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 0, 0, 5});
  in.group_ids = at::tensor(std::vector<int64_t>{0, 0, 0, 0});
  in.mask = T({1, 1, 0,  //
               1, 0, 1,  //
               0, 1, 1,  //
               0, 0, 0},
              {4, 3});
  in.token_rewards = T({-0.25, 0.5, 9,  //
                        -0.5, 9, 0,     //
                        9, -0.125, 0.375, 9, 9, 9},
                       {4, 3});
  const std::vector<double> r = {0.25, -0.5, 0.25, 5};  // row sums; row 3 is empty
  const double mean = (0.25 - 0.5 + 0.25 + 5) / 4;
  double sq = 0;
  for (double x : r) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / 3);
  auto grpo = make_grpo({})->get()->compute(in);
  ASSERT_TRUE(grpo.ok()) << grpo.status();
  auto a = [&](int i) { return static_cast<float>((r[i] - mean) / (sd + 1e-6)); };
  expect_near(grpo->advantages, {a(0), a(0), 0, a(1), 0, a(1), 0, a(2), a(2), 0, 0, 0}, 1e-5);
  auto dr = make_dr_grpo({})->get()->compute(in);
  ASSERT_TRUE(dr.ok());
  auto c = [&](int i) { return static_cast<float>(r[i] - mean); };
  expect_near(dr->advantages, {c(0), c(0), 0, c(1), 0, c(1), 0, c(2), c(2), 0, 0, 0}, 1e-5);
  auto rloo = make_rloo({})->get()->compute(in);
  ASSERT_TRUE(rloo.ok());
  auto l = [&](int i) { return static_cast<float>(4.0 / 3 * (r[i] - mean)); };
  expect_near(rloo->advantages, {l(0), l(0), 0, l(1), 0, l(1), 0, l(2), l(2), 0, 0, 0}, 1e-5);
  // REINFORCE++-baseline: centred on the same r_i before whitening.
  auto base = make_reinforce_pp_baseline({})->get()->compute(in);
  ASSERT_TRUE(base.ok());
  AdvantageInput plain = in;
  plain.token_rewards = at::Tensor();
  plain.scores = at::tensor(std::vector<float>{0.25, -0.5, 0.25, 5});
  auto expected = make_reinforce_pp_baseline({})->get()->compute(plain);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(at::allclose(base->advantages, expected->advantages, 1e-5, 1e-6));
}

TEST(ReinforcePpBaselineTest, GroupCenteredThenTokenWeightedWhitening) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 3});
  in.group_ids = at::tensor(std::vector<int64_t>{0, 0});
  in.mask = T({1, 0, 1, 1}, {2, 2});
  auto r = make_reinforce_pp_baseline({})->get()->compute(in);
  ASSERT_TRUE(r.ok());
  // Centered {-1 | +1, +1}: mean 1/3, unbiased var 4/3.
  const double sd = std::sqrt(4.0 / 3 + 1e-8);
  expect_near(r->advantages,
              {static_cast<float>((-1 - 1.0 / 3) / sd), 0, static_cast<float>((1 - 1.0 / 3) / sd),
               static_cast<float>((1 - 1.0 / 3) / sd)},
              1e-4);
}

// ReMax (§1.7): reward-to-go (interior zeros skipped, not reset) minus the greedy baseline on
// valid tokens; no whitening.
TEST(RemaxTest, RewardToGoMinusTheGreedyBaseline) {
  AdvantageInput in;
  in.mask = T({1, 0, 1, 1, 1, 0}, {2, 3});
  in.token_rewards = T({0.5, 9, 1, 0, 2, 0}, {2, 3});  // the 9 sits on a masked token
  in.baselines = at::tensor(std::vector<float>{0.25, 1});
  auto estimator = make_remax({});
  ASSERT_TRUE(estimator.ok());
  EXPECT_TRUE((*estimator)->needs_greedy_baseline());
  auto r = (*estimator)->compute(in);
  ASSERT_TRUE(r.ok()) << r.status();
  expect_near(r->returns, {1.5, 0, 1, 2, 2, 0});
  expect_near(r->advantages, {1.25, 0, 0.75, 1, 1, 0});
  // Outcome scores sit on the last valid token.
  in.token_rewards = at::Tensor();
  in.scores = at::tensor(std::vector<float>{1, 0});
  r = (*estimator)->compute(in);
  ASSERT_TRUE(r.ok());
  expect_near(r->advantages, {0.75, 0, 0.75, -1, -1, 0});
  in.baselines = at::Tensor();
  EXPECT_THAT(std::string((*estimator)->compute(in).status().message()),
              ::testing::HasSubstr("baselines"));
  EXPECT_FALSE((*make_grpo({}))->needs_greedy_baseline());
}

// GRPO with process supervision (DeepSeekMath §4.1.3): the group's step rewards are normalised
// together, and a token's advantage sums the normalised rewards of the steps ending at or after it.
TEST(GrpoProcessTest, NormalisesAllOfAGroupsStepRewardsThenSumsThoseAhead) {
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1.5, 0.25, 9});
  in.group_ids = at::tensor(std::vector<int64_t>{4, 4, 8});
  in.mask = T({1, 1, 1,  //
               1, 1, 0,  //
               1, 1, 1},
              {3, 3});
  // Row 0: a step ends at 0 (0.5) and the last token pays 1; row 1: a step at 0 (0.25), the
  // last valid token (1) pays 0, the masked 7 is ignored; row 2 is alone in its group.
  in.token_rewards = T({0.5, 0, 1,   //
                        0.25, 0, 7,  //
                        2, 3, 4},
                       {3, 3});
  in.reward_ends = T({1, 0, 0,  //
                      1, 0, 1,  //
                      0, 1, 0},
                     {3, 3});
  const std::vector<double> v = {0.5, 1, 0.25, 0};
  const double mean = 0.4375;
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / 3);
  auto n = [&](double x) { return (x - mean) / (sd + 1e-6); };
  auto r = make_grpo_process({})->get()->compute(in);
  ASSERT_TRUE(r.ok()) << r.status();
  const float s = static_cast<float>(1 / (1 + 1e-6));  // the singleton: mean 0, std 1
  expect_near(r->advantages,
              {static_cast<float>(n(0.5) + n(1)), static_cast<float>(n(1)),
               static_cast<float>(n(1)),                                         //
               static_cast<float>(n(0.25) + n(0)), static_cast<float>(n(0)), 0,  //
               7 * s, 7 * s, 4 * s},
              1e-5);
  // gamma 0: each step end keeps its own normalised reward; other tokens get 0.
  EstimatorOptions o;
  o.gamma = 0;
  o.norm_by_std = false;
  auto g0 = make_grpo_process(o)->get()->compute(in);
  ASSERT_TRUE(g0.ok()) << g0.status();
  expect_near(g0->advantages, {0.0625, 0, 0.5625, -0.1875, -0.4375, 0, 0, 3, 4}, 1e-6);
  in.reward_ends = at::zeros({3, 2});
  EXPECT_FALSE(make_grpo_process({})->get()->compute(in).ok());
}

// Without steps (one reward per row, on its last token) it is GRPO.
TEST(GrpoProcessTest, WithoutStepsItIsGrpo) {
  const AdvantageInput in = grouped_input();
  for (bool norm_by_std : {true, false}) {
    EstimatorOptions o;
    o.norm_by_std = norm_by_std;
    auto process = make_grpo_process(o)->get()->compute(in);
    auto outcome = make_grpo(o)->get()->compute(in);
    ASSERT_TRUE(process.ok() && outcome.ok());
    EXPECT_TRUE(at::allclose(process->advantages, outcome->advantages, 1e-6, 1e-7));
  }
}

TEST(ScoresOnLastTokenTest, PutsEachScoreOnTheLastValidToken) {
  expect_near(scores_on_last_token(at::tensor(std::vector<float>{5, 7, 9}),
                                   T({1, 1, 0, 1, 0, 1, 0, 0, 0}, {3, 3})),
              {0, 5, 0, 0, 0, 7, 0, 0, 0});
}

TEST(AdvantageInputTest, MisshapenInputsAreErrors) {
  AdvantageInput in = grouped_input();
  in.group_ids = at::Tensor();
  EXPECT_FALSE(make_grpo({})->get()->compute(in).ok());
  in = grouped_input();
  in.scores = at::zeros({3});
  EXPECT_FALSE(make_rloo({})->get()->compute(in).ok());
}

}  // namespace
}  // namespace flywheel::algos
