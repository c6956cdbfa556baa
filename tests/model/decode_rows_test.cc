#include "flywheel/model/cpu/decode_rows.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flywheel/model/decoder.h"

namespace flywheel::model {
namespace {

// LibTorch's rotate-half RoPE, as the decoder's training path computes it.
at::Tensor reference_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// The largest difference between a and b in units of b's last place in a's dtype (bfloat16: 8
// bits of mantissa, float32: 24), where b is a normal number (1e-30 and up in magnitude); where it
// is not, a must be within 1e-30 of it.
double max_ulps(const at::Tensor& a, const at::Tensor& b) {
  const double bits = a.scalar_type() == at::kBFloat16 ? 8 : 24;
  at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  at::Tensor normal = bd.abs().ge(1e-30);
  if ((ad - bd).abs().masked_select(normal.logical_not()).gt(1e-30).any().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  at::Tensor ulp = at::exp2(at::floor(at::log2(bd.abs())) - (bits - 1));
  return ((ad - bd).abs() / ulp).masked_select(normal).max().item<double>();
}

constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16};

TEST(DecodeRowsTest, RmsNormMatchesLibTorchWithinARoundingOnEveryThreadCount) {
  at::manual_seed(3);
  WorkerPool pool(3);
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t rows : {1, 5, 40}) {
      for (int64_t hidden : {7, 64, 768}) {  // below, at and past the 16 lanes of the sum
        at::Tensor x = (at::randn({rows, 1, hidden}) * 3).to(dtype);
        at::Tensor weight = (at::rand({hidden}) + 0.5).to(dtype);
        at::Tensor ours = rms_norm_rows(x, weight, 1e-6, &pool);
        at::Tensor theirs = rms_norm(x, weight, 1e-6);
        ASSERT_EQ(ours.sizes(), x.sizes());
        ASSERT_EQ(ours.scalar_type(), dtype);
        // The sum of squares is in another order: the scale may differ in its last bit, which
        // may move a rounding to bfloat16 by one place.
        EXPECT_LE(max_ulps(ours, theirs), dtype == at::kFloat ? 4.0 : 1.0)
            << c10::toString(dtype) << " rows " << rows << " hidden " << hidden;
        if (dtype == at::kBFloat16) {
          EXPECT_LT(ours.ne(theirs).to(at::kDouble).mean().item<double>(), 0.01)
              << "rows " << rows << " hidden " << hidden << ": more than a few elements differ";
        }
        EXPECT_TRUE(at::equal(ours, rms_norm_rows(x, weight, 1e-6, nullptr)))
            << "a row's result must not depend on the thread count";
      }
    }
  }
}

TEST(DecodeRowsTest, RopeEqualsLibTorchBitForBitAndTheNormBeforeItMatches) {
  at::manual_seed(4);
  WorkerPool pool(3);
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t rows : {1, 3, 33}) {
      const int64_t heads = 4, hd = 64;
      at::Tensor t = at::randn({rows, 1, heads, hd}).to(dtype);
      at::Tensor angles = at::rand({rows, 1, 1, hd}) * 20;
      at::Tensor cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
      NormRopeOptions options;
      options.cos = cos;
      options.sin = sin;
      options.pool = &pool;
      at::Tensor ours = norm_rope_rows(t, options);
      EXPECT_TRUE(at::equal(ours, reference_rope(t, cos, sin)))
          << c10::toString(dtype) << " rows " << rows << ": "
          << (ours.to(at::kFloat) - reference_rope(t, cos, sin).to(at::kFloat)).abs().max();

      options.norm = (at::rand({hd}) + 0.5).to(dtype);
      options.eps = 1e-5;
      at::Tensor normed = norm_rope_rows(t, options);
      at::Tensor expected = reference_rope(rms_norm(t, options.norm, 1e-5), cos, sin);
      // The norm's last-bit differences pass through RoPE's products and sum.
      EXPECT_TRUE(at::allclose(normed.to(at::kFloat), expected.to(at::kFloat),
                               dtype == at::kFloat ? 1e-5 : 2e-2,
                               dtype == at::kFloat ? 1e-5 : 2e-2))
          << c10::toString(dtype) << " rows " << rows;
      options.pool = nullptr;
      EXPECT_TRUE(at::equal(normed, norm_rope_rows(t, options)));
    }
  }
}

TEST(DecodeRowsTest, SiluMulMatchesLibTorchWithinARounding) {
  at::manual_seed(5);
  WorkerPool pool(3);
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t rows : {1, 40}) {
      // Gates from deep in the negative tail to large positives, past the exp's clamp.
      at::Tensor gate = (at::randn({rows, 1, 2048}) * 30).to(dtype);
      at::Tensor up = at::randn({rows, 1, 2048}).to(dtype);
      at::Tensor ours = silu_mul_rows(gate, up, &pool);
      at::Tensor theirs = at::silu(gate) * up;
      // exp in another approximation moves silu's rounding to bfloat16 by a place now and then,
      // and the product's rounding after it by at most one more.
      EXPECT_LE(max_ulps(ours, theirs), dtype == at::kFloat ? 4.0 : 2.0)
          << c10::toString(dtype) << " rows " << rows;
      if (dtype == at::kBFloat16) {
        EXPECT_LT(ours.ne(theirs).to(at::kDouble).mean().item<double>(), 0.01)
            << "rows " << rows << ": more than a few elements differ";
      }
      EXPECT_TRUE(at::equal(ours, silu_mul_rows(gate, up, nullptr)));
    }
  }
  at::Tensor special = at::tensor({0.0f, -200.0f, 200.0f, NAN});
  at::Tensor out = silu_mul_rows(special, at::ones({4}));
  EXPECT_EQ(out[0].item<float>(), 0.0f);
  EXPECT_NEAR(out[1].item<float>(), 0.0f, 1e-30);
  EXPECT_EQ(out[2].item<float>(), 200.0f);
  EXPECT_TRUE(std::isnan(out[3].item<float>()));
}

// Each row's log-sum-exp is within 2 ulps of LibTorch's (the max subtracted, poly_exp), and is
// the same bits whether the row is computed alone, among other rows, or on more threads: what
// makes the engine's and the learner's log-probs equal.
TEST(DecodeRowsTest, LogsumexpRowsMatchesLibTorchAndDependsOnEachRowAlone) {
  at::manual_seed(5);
  WorkerPool pool(3);
  for (int64_t n : {1, 15, 16, 17, 1000, 50257}) {
    const at::Tensor x = at::randn({7, n}) * 6;
    const at::Tensor all = logsumexp_rows(x, &pool);
    EXPECT_LE(max_ulps(all, at::logsumexp(x, -1)), 2.0) << n;
    EXPECT_TRUE(at::equal(all, logsumexp_rows(x)));
    for (int64_t r = 0; r < 7; ++r) {
      EXPECT_EQ(logsumexp_rows(x.narrow(0, r, 1).contiguous())[0].item<float>(),
                all[r].item<float>());
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor special =
      at::tensor({-inf, -inf, -inf, -inf, inf, 1.0f, NAN, 2.0f, 0.0f, -200.0f, 0.0f, -inf},
                 at::kFloat)
          .view({4, 3});
  const at::Tensor out = logsumexp_rows(special);
  EXPECT_EQ(out[0].item<float>(), -inf);
  EXPECT_EQ(out[1].item<float>(), inf);
  EXPECT_TRUE(std::isnan(out[2].item<float>()));
  EXPECT_FLOAT_EQ(out[3].item<float>(), 0.0f);  // exp(-200) is below float32's range: 0
  // The same cases in rows long enough for the 16-lane loop (the maximum is kept as integer
  // keys there), a NaN of either sign, and rows of negative values only.
  at::Tensor lanes = at::randn({7, 40}) - 10;
  lanes[0].fill_(-inf);
  lanes[1][20] = inf;
  lanes[2][5] = NAN;
  lanes[3][33] = -std::numeric_limits<float>::quiet_NaN();
  lanes[4][17] = -3.0f;  // the maximum, in the second block of 16
  lanes[5].fill_(0.0f);
  lanes[5][3] = -0.0f;
  const at::Tensor long_out = logsumexp_rows(lanes);
  EXPECT_EQ(long_out[0].item<float>(), -inf);
  EXPECT_EQ(long_out[1].item<float>(), inf);
  EXPECT_TRUE(std::isnan(long_out[2].item<float>()));
  EXPECT_TRUE(std::isnan(long_out[3].item<float>()));
  for (int64_t r = 4; r < 7; ++r) {
    EXPECT_LE(max_ulps(long_out.narrow(0, r, 1), at::logsumexp(lanes.narrow(0, r, 1), -1)), 2.0)
        << r;
  }
}

TEST(DecodeRowsTest, RejectsWhatItCannotServeWithAnErrorNamingIt) {
  at::Tensor x = at::randn({4, 8});
  at::Tensor w = at::ones({8});
  auto message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { rms_norm_rows(x.t(), w, 1e-6); }).find("not contiguous"),
            std::string::npos);
  EXPECT_NE(message([&] { logsumexp_rows(x.to(at::kDouble)); }).find("logsumexp_rows"),
            std::string::npos);
  EXPECT_NE(message([&] { rms_norm_rows(x.to(at::kDouble), w, 1e-6); }).find("Double"),
            std::string::npos);
  EXPECT_NE(message([&] { rms_norm_rows(x, at::ones({7}), 1e-6); }).find("weight [8]"),
            std::string::npos);
  EXPECT_NE(message([&] { rms_norm_rows(x, w.to(at::kBFloat16), 1e-6); }).find("one dtype"),
            std::string::npos);
  EXPECT_NE(message([&] {
              silu_mul_rows(x, at::ones({4, 9}));
            }).find("one shape"),
            std::string::npos);
  NormRopeOptions options;
  options.cos = at::ones({4, 8});
  options.sin = at::ones({3, 8});
  EXPECT_NE(message([&] {
              norm_rope_rows(x.view({4, 1, 8}), options);
            }).find("cos and sin"),
            std::string::npos);
  EXPECT_NE(message([&] {
              norm_rope_rows(at::ones({4, 7}), options);
            }).find("even head_dim"),
            std::string::npos);
}

}  // namespace
}  // namespace flywheel::model
