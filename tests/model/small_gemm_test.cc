#include "flywheel/model/cpu/small_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flywheel/model/decoder.h"
#include "test_models.h"

namespace flywheel::model {
namespace {

std::vector<GemmIsa> supported_isas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (gemm_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// The bfloat16 kernels this CPU runs: AVX512-BF16 (as kAvx512) and AVX2's widening one.
std::vector<GemmIsa> bf16_isas() {
  std::vector<GemmIsa> isas;
  if (avx512_bf16_supported()) isas.push_back(GemmIsa::kAvx512);
  if (gemm_isa_supported(GemmIsa::kAvx2)) isas.push_back(GemmIsa::kAvx2);
  return isas;
}

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
  if (b.defined()) y = y + b.to(at::kDouble);
  return y.to(at::kFloat);
}

TEST(SmallGemmTest, MatchesAMatmulForEveryTileEdgeAndIsa) {
  if (supported_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::manual_seed(3);
  WorkerPool pool(3);
  int checked = 0;
  for (GemmIsa isa : supported_isas()) {
    // Row counts around the 3- and 4-row tiles, column counts around the 4-column blocks, and
    // depths around the 8- and 16-lane vectors (the masked tail).
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 13, 64, 70}) {
      for (int64_t n : {1, 3, 4, 5, 9, 17, 64}) {
        for (int64_t k : {1, 7, 8, 15, 16, 17, 33, 100}) {
          at::Tensor x = at::randn({m, k}), w = at::randn({n, k}), b = at::randn({n});
          for (bool bias : {false, true}) {
            const at::Tensor used_b = bias ? b : at::Tensor();
            at::Tensor y = small_linear(x, w, used_b, {isa, &pool});
            ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, n}));
            EXPECT_TRUE(at::allclose(y, reference(x, w, used_b), 1e-5, 1e-4))
                << gemm_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " bias=" << bias;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 1120);
}

TEST(SmallGemmTest, ResultsDoNotDependOnTheThreadCount) {
  if (supported_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::manual_seed(4);
  // Large enough to be split between threads (64 x 301 x 768 multiply-adds).
  at::Tensor x = at::randn({64, 768}), w = at::randn({301, 768}), b = at::randn({301});
  at::Tensor one = small_linear(x, w, b);
  for (int threads : {2, 3, 5}) {
    WorkerPool pool(threads);
    EXPECT_TRUE(at::equal(small_linear(x, w, b, {GemmIsa::kAuto, &pool}), one))
        << threads << " threads";
  }
}

TEST(SmallGemmTest, ReadsRowsWithAStrideAndEmptyShapes) {
  if (supported_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::Tensor wide = at::randn({6, 40});
  at::Tensor x = wide.narrow(1, 3, 32);  // row stride 40
  at::Tensor w = at::randn({5, 32});
  EXPECT_TRUE(at::allclose(small_linear(x, w), reference(x, w, {}), 1e-5, 1e-4));
  EXPECT_EQ(small_linear(at::randn({0, 32}), w).sizes(), (std::vector<int64_t>{0, 5}));
}

TEST(SmallGemmTest, RejectsWhatItCannotRun) {
  if (supported_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::Tensor x = at::randn({2, 8}), w = at::randn({3, 8});
  EXPECT_THROW(small_linear(x, at::randn({3, 9})), c10::Error);       // K differs
  EXPECT_THROW(small_linear(x.to(at::kDouble), w), c10::Error);       // not float32
  EXPECT_THROW(small_linear(x, w.t().contiguous().t()), c10::Error);  // w not contiguous
  EXPECT_THROW(small_linear(x, w, at::randn({4})), c10::Error);       // bias size
  EXPECT_THROW(small_linear(x, w, {}, {GemmIsa::kNone, nullptr}), c10::Error);
  if (!gemm_isa_supported(GemmIsa::kAvx512)) {
    EXPECT_THROW(small_linear(x, w, {}, {GemmIsa::kAvx512, nullptr}), c10::Error);
  }
}

// bfloat16 inputs: the products of bfloat16 pairs summed in float32 and rounded once, so the
// result is the exact sum (in double) rounded to bfloat16, up to float32's rounding of the sum.
// Both kernels: AVX512-BF16's vdpbf16ps and AVX2's widening to float32.
TEST(SmallGemmTest, Bf16MatchesTheExactSumRoundedOnceForEveryTileEdgeAndKernel) {
  if (bf16_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2";
  at::manual_seed(6);
  WorkerPool pool(3);
  int checked = 0;
  for (GemmIsa isa : bf16_isas()) {
    // Depths around the 16- and 32-element steps (the tails) as well as the tiles' edges.
    for (int64_t m : {1, 3, 4, 5, 8, 13, 70}) {
      for (int64_t n : {1, 3, 4, 5, 17, 64}) {
        for (int64_t k : {1, 15, 16, 17, 31, 32, 33, 64, 100}) {
          at::Tensor x = at::randn({m, k}).to(at::kBFloat16);
          at::Tensor w = at::randn({n, k}).to(at::kBFloat16);
          at::Tensor b = at::randn({n}).to(at::kBFloat16);
          for (bool bias : {false, true}) {
            const at::Tensor used_b = bias ? b : at::Tensor();
            const at::Tensor exact = reference(x, w, used_b);  // float32 of the double sum
            at::Tensor y = small_linear(x, w, used_b, {isa, &pool});
            ASSERT_EQ(y.scalar_type(), at::kBFloat16);
            const std::string where = std::string(gemm_isa_name(isa)) + " m=" + std::to_string(m) +
                                      " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                      " bias=" + std::to_string(bias);
            // One bfloat16 rounding (2^-8 relative) of a sum whose float32 error is far below it.
            EXPECT_TRUE(at::allclose(y.to(at::kFloat), exact, 1.0 / 256, 1e-4)) << where;
            at::Tensor y32 = small_linear(x, w, used_b, {isa, &pool, at::kFloat});
            ASSERT_EQ(y32.scalar_type(), at::kFloat);
            EXPECT_TRUE(at::allclose(y32, exact, 1e-5, 1e-4)) << "float32 out " << where;
            // The bfloat16 output is the float32 one rounded to nearest even, as LibTorch rounds.
            EXPECT_TRUE(at::equal(y, y32.to(at::kBFloat16))) << where;
            ++checked;
          }
        }
      }
    }
    // Independent of the thread count.
    at::Tensor x = at::randn({64, 768}).to(at::kBFloat16),
               w = at::randn({301, 768}).to(at::kBFloat16);
    EXPECT_TRUE(
        at::equal(small_linear(x, w, {}, {isa, nullptr}), small_linear(x, w, {}, {isa, &pool})));
  }
  EXPECT_EQ(checked, 756 * static_cast<int>(bf16_isas().size()));
}

// A row's outputs are the same bits whatever other rows x has: the engine's decode steps (a
// batch's rows), its prefills and the learner's log-prob pass over whole sequences must agree bit
// for bit (docs/rollout.md "Equal log-probs"). Row counts cover one row, the tiles' 3-row edges
// and, in bfloat16 without AVX512-BF16, the widened path from 16 rows; depths cover the tails.
TEST(SmallGemmTest, ARowGivesTheSameBitsWhateverTheOtherRows) {
  struct Kernel {
    at::ScalarType dtype;
    GemmIsa isa;
  };
  std::vector<Kernel> kernels;
  for (GemmIsa isa : supported_isas()) kernels.push_back({at::kFloat, isa});
  for (GemmIsa isa : bf16_isas()) kernels.push_back({at::kBFloat16, isa});
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::manual_seed(12);
  WorkerPool pool(2);
  for (const Kernel& kernel : kernels) {
    for (int64_t k : {40, 100, 768}) {
      const at::TensorOptions options = at::TensorOptions().dtype(kernel.dtype);
      at::Tensor x = at::randn({200, k}).to(options), w = at::randn({37, k}).to(options);
      at::Tensor b = at::randn({37}).to(options);
      for (at::ScalarType out : {kernel.dtype, at::kFloat}) {
        const SmallLinearOptions o{kernel.isa, &pool, out};
        const at::Tensor all = small_linear(x, w, b, o);
        for (int64_t m : {1, 2, 3, 5, 15, 16, 17, 64}) {
          const at::Tensor some = small_linear(x.narrow(0, 0, m), w, b, o);
          EXPECT_TRUE(at::equal(some, all.narrow(0, 0, m)))
              << gemm_isa_name(kernel.isa) << " " << kernel.dtype << " -> " << out << " k=" << k
              << " rows=" << m;
        }
        const at::Tensor last = small_linear(x.narrow(0, 199, 1), w, b, o);
        EXPECT_TRUE(at::equal(last, all.narrow(0, 199, 1)));
      }
    }
  }
}

TEST(SmallGemmTest, Bf16RejectsMixedDtypesAndOtherOutputs) {
  at::Tensor x = at::randn({2, 32}).to(at::kBFloat16), w = at::randn({3, 32}).to(at::kBFloat16);
  if (!avx512_bf16_supported()) {  // kAvx512 names AVX512-BF16 for bfloat16
    EXPECT_THROW(small_linear(x, w, {}, {GemmIsa::kAvx512, nullptr}), c10::Error);
  }
  if (!bf16_gemm_supported()) {
    EXPECT_FALSE(small_gemm_supports(at::kBFloat16));
    EXPECT_THROW(small_linear(x, w), c10::Error);
    return;
  }
  EXPECT_TRUE(small_gemm_supports(at::kBFloat16));
  EXPECT_THROW(small_linear(x, w.to(at::kFloat)), c10::Error);
  EXPECT_THROW(small_linear(x, w, at::randn({3})), c10::Error);  // float32 bias
  EXPECT_THROW(small_linear(x, w, {}, {GemmIsa::kAuto, nullptr, at::kDouble}), c10::Error);
  EXPECT_THROW(small_linear(x, w, {}, {GemmIsa::kNone, nullptr}), c10::Error);
  EXPECT_FALSE(small_gemm_supports(at::kDouble));
}

// The decoder runs its float32 projections in these kernels without gradients and in LibTorch
// with them: both give the same hidden states, and gradients still flow.
TEST(SmallGemmTest, DecoderForwardMatchesTheLibTorchPathAndKeepsGradients) {
  if (supported_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  auto model = testing::tiny_model("qwen2");
  ForwardBatch batch;
  batch.tokens = at::randint(model->config().vocab_size, {3, 9}, at::kLong);
  batch.positions = at::arange(9, at::kLong).expand({3, 9}).contiguous();
  at::Tensor kernels;
  {
    at::NoGradGuard no_grad;
    kernels = model->logits(model->forward(batch));
  }
  for (const auto& [name, p] : model->named_parameters()) p.requires_grad_(true);
  at::Tensor libtorch = model->logits(model->forward(batch));
  ASSERT_TRUE(libtorch.requires_grad());
  EXPECT_TRUE(at::allclose(kernels, libtorch.detach(), 1e-4, 1e-4))
      << (kernels - libtorch.detach()).abs().max().item<double>();
  libtorch.sum().backward();
  EXPECT_TRUE(model->named_parameters().front().second.grad().defined());
  for (const auto& [name, p] : model->named_parameters()) p.requires_grad_(false);
}

}  // namespace
}  // namespace flywheel::model
