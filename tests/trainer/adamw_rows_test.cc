// The one-pass AdamW update against the textbook formula in double precision and against the
// tensor ops ShardedAdamW runs where the one pass does not apply (CUDA, other dtypes).
#include "flywheel/trainer/adamw_rows.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace flywheel::trainer {
namespace {

struct State {
  at::Tensor p, g, m, v, mask;
};

State random_state(int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  State s;
  s.p = at::randn({n});
  s.g = at::randn({n}) * 3;
  s.m = at::randn({n}) * 0.1;
  s.v = at::rand({n}) * 0.01;
  s.mask = (at::rand({n}) > 0.3).to(at::kFloat);
  return s;
}

// p, m and v after one update, in double: the formula of docs/training.md (PyTorch's AdamW), with
// how far float32 may be from each: a few roundings of the terms' magnitudes (m's two terms may
// cancel; its error reaches p through the update).
struct Expected {
  std::vector<double> value, tolerance;  // p, m, v of element i at 3i, 3i+1, 3i+2
};
Expected reference(const State& s, const AdamWCoefficients& c, bool decay) {
  const auto p = s.p.accessor<float, 1>(), g = s.g.accessor<float, 1>();
  const auto m = s.m.accessor<float, 1>(), v = s.v.accessor<float, 1>();
  const auto mask = s.mask.accessor<float, 1>();
  Expected out;
  out.value.resize(3 * p.size(0));
  out.tolerance.resize(3 * p.size(0));
  constexpr double kUlps = 4 * 0x1p-24;
  for (int64_t i = 0; i < p.size(0); ++i) {
    const double gi = double(g[i]) * c.grad_scale;
    double pi = p[i];
    if (decay) pi *= 1 - c.lr * c.weight_decay * mask[i];
    const double mi = c.beta1 * m[i] + (1 - c.beta1) * gi;
    const double vi = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
    const double denom = std::sqrt(vi / c.bias2) + c.eps;
    const double m_size = std::abs(c.beta1 * m[i]) + std::abs((1 - c.beta1) * gi);
    out.value[3 * i] = pi - c.lr * (mi / c.bias1) / denom;
    out.value[3 * i + 1] = mi;
    out.value[3 * i + 2] = vi;
    out.tolerance[3 * i] = kUlps * (std::abs(pi) + c.lr * (m_size / c.bias1) / denom);
    out.tolerance[3 * i + 1] = kUlps * m_size;
    out.tolerance[3 * i + 2] = kUlps * vi;
  }
  return out;
}

void run(State& s, const AdamWCoefficients& c, bool with_mask) {
  AdamWRows rows;
  rows.param = s.p.data_ptr<float>();
  rows.grad = s.g.data_ptr<float>();
  rows.exp_avg = s.m.data_ptr<float>();
  rows.exp_avg_sq = s.v.data_ptr<float>();
  rows.decay_mask = with_mask ? s.mask.data_ptr<float>() : nullptr;
  rows.n = s.p.numel();
  adamw_update_rows(rows, c);
}

AdamWCoefficients coefficients(int step, double grad_scale, double weight_decay) {
  AdamWCoefficients c;
  c.lr = 3e-3;
  c.grad_scale = grad_scale;
  c.weight_decay = weight_decay;
  c.bias1 = 1 - std::pow(c.beta1, step);
  c.bias2 = 1 - std::pow(c.beta2, step);
  return c;
}

TEST(AdamWRowsTest, MatchesTheTextbookUpdateInDouble) {
  // Odd sizes: the vectorised loop's remainder too.
  for (int64_t n : {0, 1, 7, 1001}) {
    for (int step : {1, 10}) {
      for (double scale : {1.0, 0.25}) {
        for (double wd : {0.0, 0.1}) {
          for (bool with_mask : {false, true}) {
            State s = random_state(n, 7 + n + step);
            const AdamWCoefficients c = coefficients(step, scale, wd);
            const Expected want = reference(s, c, with_mask && wd != 0);
            const at::Tensor grad_before = s.g.clone();
            run(s, c, with_mask);
            SCOPED_TRACE(testing::Message() << "n " << n << " step " << step << " scale " << scale
                                            << " wd " << wd << " mask " << with_mask);
            const auto p = s.p.accessor<float, 1>(), m = s.m.accessor<float, 1>(),
                       v = s.v.accessor<float, 1>();
            for (int64_t i = 0; i < n; ++i) {
              const float got[3] = {p[i], m[i], v[i]};
              for (int j = 0; j < 3; ++j) {
                ASSERT_NEAR(got[j], want.value[3 * i + j], want.tolerance[3 * i + j])
                    << "element " << i << " of "
                    << "pmv"[j];
              }
            }
            EXPECT_TRUE(at::equal(s.g, grad_before)) << "the gradient is read, not written";
          }
        }
      }
    }
  }
}

TEST(AdamWRowsTest, AgreesWithTheTensorOps) {
  State s = random_state(4099, 3);
  State t{s.p.clone(), s.g.clone(), s.m.clone(), s.v.clone(), s.mask.clone()};
  const AdamWCoefficients c = coefficients(5, 0.5, 0.01);
  run(s, c, true);
  // ShardedAdamW's tensor path (sharded_adamw.cc).
  t.g.mul_(c.grad_scale);
  t.p.mul_(1 - c.lr * c.weight_decay * t.mask);
  t.m.mul_(c.beta1).add_(t.g, 1 - c.beta1);
  t.v.mul_(c.beta2).addcmul_(t.g, t.g, 1 - c.beta2);
  at::Tensor denom = t.v.sqrt();
  denom.div_(std::sqrt(c.bias2)).add_(c.eps);
  t.p.addcdiv_(t.m, denom, -c.lr / c.bias1);
  // The same float32 operations; LibTorch may fuse a multiply-add: a few units in the last place
  // of the terms (m's ~0.3, v's ~0.01, p's ~1).
  EXPECT_TRUE(at::allclose(s.m, t.m, 1e-6, 1e-7)) << (s.m - t.m).abs().max();
  EXPECT_TRUE(at::allclose(s.v, t.v, 1e-6, 1e-9)) << (s.v - t.v).abs().max();
  EXPECT_TRUE(at::allclose(s.p, t.p, 1e-6, 1e-7)) << (s.p - t.p).abs().max();
}

}  // namespace
}  // namespace flywheel::trainer
