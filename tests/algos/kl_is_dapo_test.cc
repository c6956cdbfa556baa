#include <cmath>

#include <ATen/ATen.h>

#include "flywheel/algos/dapo.h"
#include "flywheel/algos/is_correction.h"
#include "flywheel/algos/kl.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace flywheel::algos {
namespace {

using testing::expect_near;
using testing::T;

struct KlCase {
  const char* name;
  std::vector<float> value, grad;
};

TEST(KlTest, EstimatorValuesAndGradients) {
  const float e1 = std::exp(-0.5f), e2 = std::exp(1.0f);
  for (const KlCase& c : std::vector<KlCase>{{"k1", {0.5, -1.0}, {1, 1}},
                                             {"k2", {0.125, 0.5}, {0.5, -1.0}},
                                             {"k3", {e1 + 0.5f - 1, e2 - 2}, {1 - e1, 1 - e2}},
                                             {"abs", {0.5, 1.0}, {1, -1}},
                                             {"k1+", {0.5, -1.0}, {0.5, -1.0}},
                                             {"k3+", {e1 + 0.5f - 1, e2 - 2}, {0.5, -1.0}}}) {
    at::Tensor x = T({-1.0, -2.0}, {1, 2}).requires_grad_(true);
    at::Tensor y = T({-1.5, -1.0}, {1, 2});
    at::Tensor kl = kl_penalty(x, y, *parse_kl_estimator(c.name));
    expect_near(kl.detach(), c.value);
    kl.sum().backward();
    expect_near(x.grad(), c.grad);
  }
  EXPECT_FALSE(parse_kl_estimator("k4").ok());
  EXPECT_EQ(*parse_kl_estimator("low_var_kl"), KlEstimator::kK3);
}

TEST(KlTest, K3IsClampedAndHasNoGradientOutside) {
  at::Tensor x = T({-40.0}, {1, 1}).requires_grad_(true);
  at::Tensor kl = kl_penalty(x, T({-10.0}, {1, 1}), KlEstimator::kK3);
  EXPECT_EQ(kl.item<float>(), 10.0f);
  kl.sum().backward();
  EXPECT_EQ(x.grad().item<float>(), 0.0f);
}

TEST(KlTest, InRewardPenalisesEveryValidToken) {
  at::Tensor r =
      kl_in_reward(at::tensor(std::vector<float>{1}), T({1, 1, 0}, {1, 3}), T({-1, -2, 5}, {1, 3}),
                   T({-1.5, -1, 0}, {1, 3}), 0.1, KlEstimator::kK1);
  expect_near(r, {-0.05, 1.1, 0});
}

TEST(KlTest, AdaptiveControllerMovesBetaTowardTheTarget) {
  AdaptiveKlController c(/*beta=*/0.1, /*target=*/0.1, /*horizon=*/10000);
  c.update(/*kl=*/0.2, /*n_steps=*/100);  // error clipped to +0.2
  EXPECT_NEAR(c.beta(), 0.1 * 1.002, 1e-12);
  c.update(0.09, 100);  // error -0.1
  EXPECT_NEAR(c.beta(), 0.1 * 1.002 * (1 - 0.1 * 0.01), 1e-12);
}

IsInput is_input() {
  IsInput in;
  // k = [3, 0.25, 1.5] on row 0; row 1: k = 2 and 3 (K = 6); masked garbage everywhere else.
  in.old_logprobs = T({std::log(3.f), std::log(0.25f), std::log(1.5f), 50,  //
                       std::log(2.f), std::log(3.f), -50, 7},
                      {2, 4});
  in.rollout_logprobs = at::zeros({2, 4});
  in.mask = T({1, 1, 1, 0, 1, 1, 0, 0}, {2, 4});
  return in;
}

IsResult correct(const std::string& name, IsOptions o = {}) {
  auto c = make_is_correction(name, o);
  EXPECT_TRUE(c.ok());
  auto r = (*c)->compute(is_input());
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(IsCorrectionTest, TokenTisTruncatesAtTwo) {
  IsResult r = correct("tis");
  expect_near(r.weights, {2, 0.25, 1.5, 0, 2, 2, 0, 0});
  EXPECT_NEAR(r.diagnostics.at("is_corrected_fraction"), 2.0 / 5, 1e-6);
  EXPECT_FALSE(r.weights.requires_grad());
}

TEST(IsCorrectionTest, SequenceTisUsesTheProductCappedAtFive) {
  IsResult r = correct("seq_tis");
  expect_near(r.weights, {1.125, 1.125, 1.125, 0, 5, 5, 0, 0});
}

TEST(IcePopTest, MasksTokensOutsideTheBandAndKeepsRawRatiosInside) {
  IsResult r = correct("icepop");
  expect_near(r.weights, {3, 0, 1.5, 0, 2, 3, 0, 0});
  EXPECT_NEAR(r.diagnostics.at("is_corrected_fraction"), 1.0 / 5, 1e-6);
  IsOptions narrow;
  narrow.low = 0.5;
  narrow.high = 2.0;
  expect_near(correct("icepop", narrow).weights, {0, 0, 1.5, 0, 2, 0, 0, 0});
}

TEST(IsCorrectionTest, SequenceMaskDropsWholeSequences) {
  expect_near(correct("seq_mask").weights, {1.125, 1.125, 1.125, 0, 0, 0, 0, 0});
}

TEST(IsCorrectionTest, DecoupledMasksAboveTheCap) {
  IsOptions cap;
  cap.high = 2.5;
  expect_near(correct("decoupled", cap).weights, {0, 0.25, 1.5, 0, 2, 0, 0, 0});
}

TEST(IsCorrectionTest, NoneGivesNoWeightsButMismatchDiagnostics) {
  IsResult r = correct("none");
  EXPECT_FALSE(r.weights.defined());
  const double mean_diff =
      (std::log(3.) + std::log(0.25) + std::log(1.5) + std::log(2.) + std::log(3.)) / 5;
  EXPECT_NEAR(r.diagnostics.at("mismatch_k1"), -mean_diff, 1e-6);
  EXPECT_NEAR(r.diagnostics.at("logprob_abs_diff_max"), std::log(4.), 1e-6);
  EXPECT_FALSE(make_is_correction("bogus", {}).ok());
}

TEST(DapoTest, DynamicSamplingKeepsGroupsWithSignal) {
  auto filter = make_nonzero_reward_std({});
  ASSERT_TRUE(filter.ok());
  EXPECT_FALSE((*filter)->keep({1, 1, 1}));
  EXPECT_FALSE((*filter)->keep({0, 0}));
  EXPECT_TRUE((*filter)->keep({1, 0}));
  EXPECT_TRUE((*filter)->keep({5}));  // singletons are kept (verl)
  EXPECT_FALSE(make_nonzero_reward_std({{"x", "1"}}).ok());
}

TEST(DapoTest, OverlongPenaltyIsLinearInTheBuffer) {
  EXPECT_EQ(overlong_penalty(/*length=*/15, /*max_len=*/20, /*buffer_len=*/5, 1.0), 0.0);
  EXPECT_EQ(overlong_penalty(10, 20, 5, 1.0), 0.0);
  EXPECT_NEAR(overlong_penalty(17, 20, 5, 1.0), -0.4, 1e-12);
  EXPECT_NEAR(overlong_penalty(20, 20, 5, 0.5), -0.5, 1e-12);
  EXPECT_EQ(overlong_penalty(20, 20, 0, 1.0), 0.0);  // off
}

}  // namespace
}  // namespace flywheel::algos
