// The DPO-family losses against values derived by hand (the numbers in the comments), their
// gradients against the closed forms, and the option checks.
#include "flywheel/algos/preference_loss.h"

#include <cmath>

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace flywheel::algos {
namespace {

at::Tensor D(std::initializer_list<double> v) {
  return at::tensor(std::vector<double>(v), at::kDouble);
}

// Two pairs. Pair 0: pi_c -10, pi_r -12, ref both -11, lengths 4 and 5: h = 2. Pair 1: pi_c -8,
// pi_r -6, ref both -7, lengths 2 and 3: h = -2.
struct Pairs {
  at::Tensor pc = D({-10, -8}).requires_grad_(true);
  at::Tensor pr = D({-12, -6}).requires_grad_(true);
  PreferencePairs get() const {
    PreferencePairs p;
    p.chosen_logps = pc;
    p.rejected_logps = pr;
    p.chosen_ref = D({-11, -7});
    p.rejected_ref = D({-11, -7});
    p.chosen_tokens = D({4, 2});
    p.rejected_tokens = D({5, 3});
    return p;
  }
};

PreferenceLossOptions opts(const char* loss, double beta, double eps = 0, double gamma = 0.5) {
  PreferenceLossOptions o;
  o.loss = loss;
  o.beta = beta;
  o.label_smoothing = eps;
  o.simpo_gamma = gamma;
  return o;
}

void expect_values(const at::Tensor& t, std::initializer_list<double> want) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  int i = 0;
  for (double w : want) EXPECT_NEAR(t[i++].item<double>(), w, 1e-12) << "entry " << i - 1;
}

TEST(PreferenceLossTest, SigmoidIsDpoAndItsRewardsAreTrls) {
  Pairs p;
  auto r = preference_loss(opts("sigmoid", 0.5), p.get());
  ASSERT_TRUE(r.ok()) << r.status();
  // z = beta h = +-1: softplus(-1) = log(1 + e^-1), softplus(1).
  expect_values(r->losses, {0.31326168751822286, 1.3132616875182228});
  expect_values(r->chosen_rewards, {0.5 * (-10 + 11), 0.5 * (-8 + 7)});
  expect_values(r->rejected_rewards, {0.5 * (-12 + 11), 0.5 * (-6 + 7)});
  // dL/dpi_c = beta (sigmoid(z) - 1) = -dL/dpi_r.
  r->losses.sum().backward();
  const double s1 = 1 / (1 + std::exp(-1.0)), s2 = 1 / (1 + std::exp(1.0));
  expect_values(p.pc.grad(), {0.5 * (s1 - 1), 0.5 * (s2 - 1)});
  expect_values(p.pr.grad(), {-0.5 * (s1 - 1), -0.5 * (s2 - 1)});
}

TEST(PreferenceLossTest, LabelSmoothingMixesInTheFlippedLabel) {
  Pairs p;
  auto r = preference_loss(opts("sigmoid", 0.5, 0.1), p.get());
  ASSERT_TRUE(r.ok()) << r.status();
  // 0.9 softplus(-z) + 0.1 softplus(z).
  expect_values(r->losses, {0.9 * 0.31326168751822286 + 0.1 * 1.3132616875182228,
                            0.9 * 1.3132616875182228 + 0.1 * 0.31326168751822286});
  // dL/dpi_c = beta (sigmoid(z) - (1 - eps)).
  r->losses.sum().backward();
  const double s1 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(p.pc.grad()[0].item<double>(), 0.5 * (s1 - 0.9), 1e-12);
}

TEST(PreferenceLossTest, IpoRegressesTheMeanLogRatioMarginOntoOneOverTwoBeta) {
  Pairs p;
  auto r = preference_loss(opts("ipo", 0.5), p.get());
  ASSERT_TRUE(r.ok()) << r.status();
  // Pair 0: h' = (-10/4 + 12/5) - (-11/4 + 11/5) = -0.1 + 0.55 = 0.45; (0.45 - 1)^2.
  // Pair 1: h' = (-8/2 + 6/3) - (-7/2 + 7/3) = -2 + 7/6 = -5/6; (-5/6 - 1)^2 = 121/36.
  expect_values(r->losses, {0.3025, 121.0 / 36});
  r->losses.sum().backward();
  // dL/dpi_c = 2 (h' - 1/(2 beta)) / n_c.
  expect_values(p.pc.grad(), {2 * (0.45 - 1) / 4, 2 * (-5.0 / 6 - 1) / 2});
}

TEST(PreferenceLossTest, HingeIsZeroPastTheMargin) {
  Pairs p;
  auto r = preference_loss(opts("hinge", 0.5), p.get());
  ASSERT_TRUE(r.ok()) << r.status();
  expect_values(r->losses, {0, 2});  // max(0, 1 - 0.5 * 2), max(0, 1 + 0.5 * 2)
  r->losses.sum().backward();
  expect_values(p.pc.grad(), {0, -0.5});
}

TEST(PreferenceLossTest, SimpoIsLengthNormalisedWithAMarginAndNoReference) {
  Pairs p;
  PreferencePairs pairs = p.get();
  pairs.chosen_ref = at::Tensor();  // reference-free
  pairs.rejected_ref = at::Tensor();
  auto r = preference_loss(opts("simpo", 0.5, 0, 0.5), pairs);
  ASSERT_TRUE(r.ok()) << r.status();
  // z = beta (pi_c/n_c - pi_r/n_r) - gamma: pair 0 0.5 (-2.5 + 2.4) - 0.5 = -0.55; pair 1
  // 0.5 (-4 + 2) - 0.5 = -1.5; loss softplus(-z).
  expect_values(r->losses, {1.0054924814633377, 1.7014132779827524});
  expect_values(r->chosen_rewards, {0.5 * -2.5, 0.5 * -4});
  expect_values(r->rejected_rewards, {0.5 * -2.4, 0.5 * -2});
  // gamma moves z and so the loss; label smoothing applies as for sigmoid.
  auto no_gamma = preference_loss(opts("simpo", 0.5, 0, 0), pairs);
  EXPECT_NEAR(no_gamma->losses[0].item<double>(), std::log1p(std::exp(0.05)), 1e-12);
  auto smoothed = preference_loss(opts("simpo", 0.5, 0.2, 0.5), pairs);
  EXPECT_NEAR(smoothed->losses[0].item<double>(),
              0.8 * std::log1p(std::exp(0.55)) + 0.2 * std::log1p(std::exp(-0.55)), 1e-12);
  r->losses.sum().backward();
  // dL/dpi_c = (beta / n_c) (sigmoid(z) - 1).
  EXPECT_NEAR(p.pc.grad()[0].item<double>(), 0.5 / 4 * (1 / (1 + std::exp(0.55)) - 1), 1e-12);
}

TEST(PreferenceLossTest, BradleyTerryRanksTwoScalarRewardsWithAMarginAndCentering) {
  Pairs p;  // pi_c, pi_r are the value head's rewards r_c, r_r here
  PreferencePairs pairs = p.get();
  pairs.chosen_ref = at::Tensor();  // no reference
  pairs.rejected_ref = at::Tensor();
  pairs.margins = D({0.5, 0});
  PreferenceLossOptions o = opts("bradley_terry", 1);
  auto r = preference_loss(o, pairs);
  ASSERT_TRUE(r.ok()) << r.status();
  // z = r_c - r_r - m: pair 0 2 - 0.5 = 1.5, pair 1 -2; loss softplus(-z).
  expect_values(r->losses, {std::log1p(std::exp(-1.5)), std::log1p(std::exp(2.0))});
  expect_values(r->chosen_rewards, {-10, -8});
  expect_values(r->rejected_rewards, {-12, -6});
  // Centering adds c (r_c + r_r)^2: 0.1 * 22^2 = 48.4, 0.1 * 14^2 = 19.6.
  o.center_coefficient = 0.1;
  auto centred = preference_loss(o, pairs);
  expect_values(centred->losses,
                {std::log1p(std::exp(-1.5)) + 48.4, std::log1p(std::exp(2.0)) + 19.6});
  centred->losses.sum().backward();
  // dL/dr_c = sigmoid(z) - 1 + 2 c (r_c + r_r); dL/dr_r = 1 - sigmoid(z) + 2 c (r_c + r_r).
  const double s = 1 / (1 + std::exp(-1.5));
  EXPECT_NEAR(p.pc.grad()[0].item<double>(), s - 1 + 0.2 * -22, 1e-12);
  EXPECT_NEAR(p.pr.grad()[0].item<double>(), 1 - s + 0.2 * -22, 1e-12);
  EXPECT_FALSE(o.uses_reference());
  o.label_smoothing = 0.1;
  EXPECT_FALSE(preference_loss(o, pairs).ok());
  o.label_smoothing = 0;
  o.center_coefficient = -1;
  EXPECT_NE(preference_loss(o, pairs).status().message().find("center_coefficient"),
            std::string::npos);
}

TEST(PreferenceLossTest, RpoAddsTheChosenNllPerTokenToAnyLoss) {
  for (const char* loss : {"sigmoid", "ipo", "hinge"}) {
    SCOPED_TRACE(loss);
    Pairs p;
    PreferenceLossOptions o = opts(loss, 0.5);
    const at::Tensor plain = preference_loss(o, p.get())->losses.detach();
    o.rpo_alpha = 0.3;
    auto r = preference_loss(o, p.get());
    ASSERT_TRUE(r.ok()) << r.status();
    // + alpha * (-pi_c / n_c): pair 0 0.3 * 10 / 4 = 0.75, pair 1 0.3 * 8 / 2 = 1.2.
    expect_values(r->losses - plain, {0.75, 1.2});
  }
  Pairs p;
  PreferenceLossOptions o = opts("sigmoid", 0.5);
  o.rpo_alpha = 0.3;
  preference_loss(o, p.get())->losses.sum().backward();
  // dL/dpi_c = beta (sigmoid(z) - 1) - alpha / n_c, z = 1 for pair 0.
  EXPECT_NEAR(p.pc.grad()[0].item<double>(), 0.5 * (1 / (1 + std::exp(-1.0)) - 1) - 0.3 / 4, 1e-12);
  o.rpo_alpha = -1;
  EXPECT_NE(preference_loss(o, p.get()).status().message().find("rpo_alpha"), std::string::npos);
}

TEST(PreferenceLossTest, BadOptionsAndInputsAreNamed) {
  Pairs p;
  EXPECT_NE(preference_loss(opts("kto", 0.5), p.get()).status().message().find("'kto'"),
            std::string::npos);
  EXPECT_NE(preference_loss(opts("sigmoid", 0), p.get()).status().message().find("beta"),
            std::string::npos);
  EXPECT_NE(preference_loss(opts("sigmoid", 0.1, 0.5), p.get())
                .status()
                .message()
                .find("label_smoothing"),
            std::string::npos);
  EXPECT_FALSE(preference_loss(opts("hinge", 0.1, 0.1), p.get()).ok());
  PreferencePairs no_ref = p.get();
  no_ref.chosen_ref = at::Tensor();
  EXPECT_NE(preference_loss(opts("sigmoid", 0.1), no_ref).status().message().find("reference"),
            std::string::npos);
  PreferencePairs ragged = p.get();
  ragged.rejected_logps = D({-1, -2, -3});
  EXPECT_FALSE(preference_loss(opts("sigmoid", 0.1), ragged).ok());
}

}  // namespace
}  // namespace flywheel::algos
