#include "flywheel/model/cpu/kernel_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flywheel::model {
namespace {

struct Kernel {
  at::ScalarType dtype;
  GemmIsa isa;
};

// Every kernel this CPU runs: float32 on AVX-512 and AVX2, bfloat16 on AVX512-BF16 (as kAvx512)
// and AVX2's widening one.
std::vector<Kernel> kernels() {
  std::vector<Kernel> all;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (gemm_isa_supported(isa)) all.push_back({at::kFloat, isa});
  }
  if (avx512_bf16_supported()) all.push_back({at::kBFloat16, GemmIsa::kAvx512});
  if (gemm_isa_supported(GemmIsa::kAvx2)) all.push_back({at::kBFloat16, GemmIsa::kAvx2});
  return all;
}

// a b in double, as float32.
at::Tensor exact_mm(const at::Tensor& a, const at::Tensor& b) {
  return at::mm(a.to(at::kDouble), b.to(at::kDouble)).to(at::kFloat);
}

// got within one rounding to `dtype` (2^-8 relative for bfloat16) of the exact float32 value.
void expect_rounded_once(const at::Tensor& got, const at::Tensor& exact, at::ScalarType dtype,
                         const std::string& where) {
  ASSERT_TRUE(got.defined()) << where;
  ASSERT_EQ(got.sizes(), exact.sizes()) << where;
  ASSERT_EQ(got.scalar_type(), dtype) << where;
  const double rtol = dtype == at::kFloat ? 1e-5 : 1.0 / 256;
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), exact, rtol, 1e-4))
      << where << ": max error " << (got.to(at::kFloat) - exact).abs().max().item<float>();
}

// The forward and the backward products against exact sums, for every kernel, at the tiles'
// edges, with and without a bias, and with rows, outputs or depth 0; all in the kernels
// (blas_rows 0), and with the products of 16 rows or more in BLAS.
TEST(KernelLinearTest, ForwardAndGradientsAreTheExactSumsRoundedOnce) {
  if (kernels().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::manual_seed(4);
  WorkerPool pool(2);
  int checked = 0;
  for (const Kernel& kernel : kernels()) {
    for (int64_t blas_rows : {0, 16}) {
      for (int64_t m : {0, 1, 5, 17, 70}) {
        for (int64_t n : {1, 4, 33}) {
          for (int64_t k : {0, 1, 16, 40}) {
            for (bool bias : {false, true}) {
              const std::string where = std::string(c10::toString(kernel.dtype)) + " " +
                                        gemm_isa_name(kernel.isa) +
                                        " blas_rows=" + std::to_string(blas_rows) +
                                        " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                        " k=" + std::to_string(k) + " bias=" + std::to_string(bias);
              const at::TensorOptions options = at::TensorOptions().dtype(kernel.dtype);
              at::Tensor x = at::randn({m, k}).to(options).requires_grad_(true);
              at::Tensor w = at::randn({n, k}).to(options).requires_grad_(true);
              at::Tensor b = bias ? at::randn({n}).to(options).requires_grad_(true) : at::Tensor();
              const at::Tensor dy = at::randn({m, n}).to(options);
              at::Tensor y = kernel_linear(x, w, b, {kernel.isa, &pool, blas_rows});
              at::Tensor exact_y = exact_mm(x.detach(), w.detach().t());
              if (bias) exact_y += b.detach().to(at::kFloat);
              expect_rounded_once(y, exact_y, kernel.dtype, "y " + where);
              y.backward(dy);
              expect_rounded_once(x.grad(), exact_mm(dy, w.detach()), kernel.dtype, "dx " + where);
              expect_rounded_once(w.grad(), exact_mm(dy.t(), x.detach()), kernel.dtype,
                                  "dw " + where);
              if (bias) {
                expect_rounded_once(b.grad(), dy.to(at::kDouble).sum(0).to(at::kFloat),
                                    kernel.dtype, "db " + where);
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 240 * static_cast<int>(kernels().size()));
}

// Inputs of any leading shape and with strided rows, and gradients only where asked for.
TEST(KernelLinearTest, TakesBatchedAndStridedInputs) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "this CPU has no bfloat16 kernel";
  at::manual_seed(5);
  const at::Tensor wide = at::randn({2, 3, 50}).to(at::kBFloat16);
  at::Tensor x = wide.narrow(-1, 5, 24).requires_grad_(false);  // rows of stride 50
  at::Tensor w = at::randn({7, 24}).to(at::kBFloat16).requires_grad_(true);
  at::Tensor y = kernel_linear(x, w);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 7}));
  const at::Tensor rows = x.reshape({6, 24});
  expect_rounded_once(y.reshape({6, 7}), exact_mm(rows, w.detach().t()), at::kBFloat16, "y");
  const at::Tensor dy = at::randn({2, 3, 7}).to(at::kBFloat16);
  y.backward(dy);
  expect_rounded_once(w.grad(), exact_mm(dy.reshape({6, 7}).t(), rows), at::kBFloat16, "dw");
  EXPECT_FALSE(x.grad().defined());
}

TEST(KernelLinearTest, RejectsMismatchedInputsByName) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "this CPU has no bfloat16 kernel";
  const at::Tensor x = at::randn({3, 8}).to(at::kBFloat16);
  try {
    kernel_linear(x, at::randn({4, 9}).to(at::kBFloat16));
    FAIL() << "a depth mismatch was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_linear: x [..., K] and w [N, K]"),
              std::string::npos)
        << e.what();
  }
  try {
    kernel_linear(x, at::randn({4, 8}));
    FAIL() << "mixed dtypes were accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("one dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flywheel::model
