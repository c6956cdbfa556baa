#include "flywheel/algos/actor_loss.h"

#include <cmath>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "test_util.h"

namespace flywheel::algos {
namespace {

using testing::expect_near;
using testing::T;

TEST(ActorLossTest, AddsKlAndEntropyTermsUnweighted) {
  at::Tensor lp = T({-1.0, -2.0}, {1, 2}).requires_grad_(true);
  at::Tensor h = T({0.5, 1.5}, {1, 2}).requires_grad_(true);
  ActorLossInput in;
  in.policy.logprobs = lp;
  in.policy.old_logprobs = lp.detach();
  in.policy.advantages = T({1, -1}, {1, 2});
  in.policy.mask = at::ones({1, 2});
  in.policy.is_weights = T({0.5, 0.5}, {1, 2});  // weights the policy term only
  in.policy.counts = local_counts(in.policy.mask);
  in.entropy = h;
  in.entropy_coef = 0.1;
  in.ref_logprobs = T({-1.5, -1.0}, {1, 2});
  in.kl_coef = 0.2;
  in.kl_estimator = KlEstimator::kK1;
  auto loss = make_ppo_clip({});
  auto r = actor_loss(**loss, in);
  ASSERT_TRUE(r.ok()) << r.status();
  // rho = 1: pg = mean(0.5 * (-1, +1)) = 0; entropy mean 1; k1 mean (0.5 - 1) / 2 = -0.25.
  EXPECT_NEAR(r->loss.item<float>(), 0 - 0.1 * 1.0 + 0.2 * -0.25, 1e-6);
  EXPECT_NEAR(r->diagnostics.at("entropy"), 1.0, 1e-6);
  EXPECT_NEAR(r->diagnostics.at("kl_loss"), -0.25, 1e-6);
  r->loss.backward();
  // d/d lp: policy -A rho w / 2 = (-0.25, +0.25); KL k1: 0.2 / 2 each.
  EXPECT_TRUE(at::allclose(lp.grad(), T({-0.25 + 0.1, 0.25 + 0.1}, {1, 2}), 0, 1e-6));
  EXPECT_TRUE(at::allclose(h.grad(), T({-0.05, -0.05}, {1, 2}), 0, 1e-7));
}

TEST(AdvantageDiagnosticsTest, MeanStdAndZeroSignalGroups) {
  at::Tensor a = T({1, 1, -1, 0, 0, 0, 0, 9}, {4, 2});
  at::Tensor m = T({1, 1, 1, 0, 1, 1, 1, 0}, {4, 2});
  Diagnostics d = advantage_diagnostics(a, m, at::tensor(std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_NEAR(d.at("advantage_mean"), 1.0 / 6, 1e-9);
  const double var =
      (2 * std::pow(1 - 1.0 / 6, 2) + std::pow(-1 - 1.0 / 6, 2) + 3 * std::pow(1.0 / 6, 2)) / 5;
  EXPECT_NEAR(d.at("advantage_std"), std::sqrt(var), 1e-9);
  EXPECT_NEAR(d.at("zero_advantage_group_fraction"), 0.5, 1e-12);  // group 1: all valid are 0
}

}  // namespace
}  // namespace flywheel::algos
