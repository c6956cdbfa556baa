#include "flywheel/model/cpu/tensor_arena.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace flywheel::model {
namespace {

// The tensors come zeroed, in their shapes and dtype, 64-byte aligned, one after another in one
// block, each with its own version counter (a write to one is not a write to the others).
TEST(TensorArenaTest, TensorsShareOneBlockButNotTheirVersions) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}, {}, {2, 0}, {4, 4, 2}};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    std::vector<at::Tensor> t = zeros_in_one_block(shapes, at::TensorOptions(dtype));
    ASSERT_EQ(t.size(), shapes.size());
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i].sizes(), at::IntArrayRef(shapes[i])) << i;
      EXPECT_EQ(t[i].scalar_type(), dtype);
      EXPECT_TRUE(t[i].is_contiguous());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t[i].data_ptr()) % 64, 0u) << i;
      EXPECT_TRUE(at::equal(t[i], at::zeros(shapes[i], dtype))) << i;
    }
    const auto* first = static_cast<const char*>(t[0].data_ptr());
    EXPECT_EQ(static_cast<const char*>(t[1].data_ptr()), first + 64);  // 15 elements, aligned
    EXPECT_GT(static_cast<const char*>(t[4].data_ptr()), static_cast<const char*>(t[1].data_ptr()));
    const auto v1 = t[1]._version();
    t[0].fill_(2.0);
    EXPECT_EQ(t[1]._version(), v1);
    EXPECT_TRUE(at::equal(t[1], at::zeros({7}, dtype)));
    t[1].fill_(3.0);
    EXPECT_TRUE(at::equal(t[0], at::full({3, 5}, 2.0, dtype)));  // no overlap
  }
}

// empty_in_one_block lays its tensors out as zeros_in_one_block does, without filling them.
TEST(TensorArenaTest, EmptyTensorsAreLaidOutTheSame) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}, {100, 3}};
  std::vector<at::Tensor> t = empty_in_one_block(shapes, at::TensorOptions(at::kBFloat16));
  ASSERT_EQ(t.size(), shapes.size());
  const auto* first = static_cast<const char*>(t[0].data_ptr());
  EXPECT_EQ(static_cast<const char*>(t[1].data_ptr()), first + 64);
  EXPECT_EQ(static_cast<const char*>(t[2].data_ptr()), first + 128);  // 14 bytes, aligned
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].sizes(), at::IntArrayRef(shapes[i])) << i;
  t[2].copy_(at::ones({100, 3}));
  EXPECT_TRUE(at::equal(t[2], at::ones({100, 3}, at::kBFloat16)));
}

// A tensor keeps the block alive when the others are gone.
TEST(TensorArenaTest, ATensorOutlivesTheOthers) {
  at::Tensor kept;
  {
    std::vector<at::Tensor> t = zeros_in_one_block({{1000}, {1000}}, at::TensorOptions(at::kFloat));
    t[0].fill_(1.0);
    t[1].fill_(5.0);
    kept = t[1];
  }
  std::vector<at::Tensor> other = zeros_in_one_block({{2000}}, at::TensorOptions(at::kFloat));
  other[0].fill_(9.0);
  EXPECT_TRUE(at::equal(kept, at::full({1000}, 5.0)));
  EXPECT_THROW(zeros_in_one_block({{2}}, at::TensorOptions(at::kFloat).device(at::kCUDA)),
               c10::Error);
}

}  // namespace
}  // namespace flywheel::model
