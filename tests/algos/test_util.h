// Literal tensors and comparisons for the algos tests.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace flywheel::algos::testing {

// A float tensor of `shape` holding `values`.
inline at::Tensor T(std::vector<float> values, std::vector<int64_t> shape) {
  return at::tensor(values).view(shape);
}

inline void expect_near(const at::Tensor& got, std::vector<float> want, double tol = 1e-5) {
  at::Tensor w = at::tensor(want).view(got.sizes());
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), w, 0, tol)) << got << "\nwant\n" << w;
}

}  // namespace flywheel::algos::testing
