#include "flywheel/model/cpu/cpu_features.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

TEST(CpuFeaturesTest, AutoIsFloat32OnACpuWithoutNativeBf16) {
  absl::StatusOr<at::ScalarType> dtype =
      resolve_dtype("auto", /*on_cuda=*/false, /*native_bf16=*/false);
  ASSERT_TRUE(dtype.ok()) << dtype.status();
  EXPECT_EQ(*dtype, at::kFloat);
}

TEST(CpuFeaturesTest, AutoIsBfloat16OnACpuWithNativeBf16) {
  absl::StatusOr<at::ScalarType> dtype =
      resolve_dtype("auto", /*on_cuda=*/false, /*native_bf16=*/true);
  ASSERT_TRUE(dtype.ok()) << dtype.status();
  EXPECT_EQ(*dtype, at::kBFloat16);
}

TEST(CpuFeaturesTest, AutoIsBfloat16OnCudaWhateverTheCpu) {
  absl::StatusOr<at::ScalarType> dtype =
      resolve_dtype("auto", /*on_cuda=*/true, /*native_bf16=*/false);
  ASSERT_TRUE(dtype.ok()) << dtype.status();
  EXPECT_EQ(*dtype, at::kBFloat16);
}

TEST(CpuFeaturesTest, ExplicitDtypesIgnoreTheCpu) {
  EXPECT_EQ(*resolve_dtype("float32", /*on_cuda=*/false, /*native_bf16=*/true), at::kFloat);
  EXPECT_EQ(*resolve_dtype("bfloat16", /*on_cuda=*/false, /*native_bf16=*/false), at::kBFloat16);
  EXPECT_EQ(*resolve_dtype("float16", /*on_cuda=*/true, /*native_bf16=*/false), at::kHalf);
}

TEST(CpuFeaturesTest, UnknownDtypeIsInvalidArgument) {
  absl::StatusOr<at::ScalarType> dtype =
      resolve_dtype("float8", /*on_cuda=*/false, /*native_bf16=*/true);
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuFeaturesTest, DetectionNamesTheCpuAndAutoFollowsIt) {
  const CpuFeatures features = detect_cpu_features();
  EXPECT_FALSE(features.model_name.empty());
  EXPECT_THAT(describe(features), ::testing::HasSubstr("native bf16: "));
  EXPECT_EQ(*resolve_dtype("auto", /*on_cuda=*/false),
            features.native_bf16 ? at::kBFloat16 : at::kFloat);
}

}  // namespace
}  // namespace flywheel::model
