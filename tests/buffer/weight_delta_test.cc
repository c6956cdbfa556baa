// The weight versions' delta encoding (weight_delta.h): exact round trips over every dtype and
// the bytes between tensors, what small updates compress to, and bad deltas refused.
#include "flywheel/buffer/weight_delta.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::buffer {
namespace {

using ::testing::HasSubstr;

// F32, BF16 and F16 tensors with a gap of 3 bytes between the first two and 5 after the last.
core::PublishedWeights mixed(uint32_t seed) {
  core::PublishedWeights w;
  w.version = seed;
  w.tensors = {{"a", "F32", {10, 100}, 0, 4000},
               {"b", "BF16", {3000}, 4003, 6000},
               {"c", "F16", {3}, 10003, 6}};
  std::mt19937 rng(seed);
  w.payload.resize(10014);
  for (char& c : w.payload) c = static_cast<char>(rng());
  return w;
}

// `n` float32 weights of scale 0.02.
core::PublishedWeights floats(size_t n, uint32_t seed) {
  core::PublishedWeights w;
  w.tensors = {{"w", "F32", {static_cast<int64_t>(n)}, 0, n * 4}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  w.payload.assign(reinterpret_cast<const char*>(values.data()), n * 4);
  return w;
}

std::vector<float> as_floats(const std::string& payload) {
  std::vector<float> v(payload.size() / 4);
  std::memcpy(v.data(), payload.data(), v.size() * 4);
  return v;
}

TEST(WeightDeltaTest, RoundTripIsExactOverEveryDtypeAndTheBytesBetweenTensors) {
  DeltaBuffers buffers;
  const core::PublishedWeights base = mixed(1);
  core::PublishedWeights next = mixed(2);  // every byte may differ, the gaps included
  next.tensors = base.tensors;
  auto delta = encode_weight_delta(base, next, {3, 1}, &buffers);
  ASSERT_TRUE(delta.ok()) << delta.status();
  std::string payload = base.payload;
  ASSERT_TRUE(apply_weight_delta(*delta, base.tensors, &payload, &buffers).ok());
  EXPECT_EQ(payload, next.payload);
  // Threads split the pieces (and zstd's input): the same result.
  for (int threads : {2, 3, 8}) {
    auto threaded = encode_weight_delta(base, next, {3, threads}, &buffers);
    ASSERT_TRUE(threaded.ok()) << threaded.status();
    payload = base.payload;
    ASSERT_TRUE(apply_weight_delta(*threaded, base.tensors, &payload, &buffers).ok());
    EXPECT_EQ(payload, next.payload) << threads;
  }
  // Equal versions: a delta of zeros.
  auto none = encode_weight_delta(base, base, {1, 1}, &buffers);
  ASSERT_TRUE(none.ok());
  EXPECT_LT(none->size(), 100u);
  payload = base.payload;
  ASSERT_TRUE(apply_weight_delta(*none, base.tensors, &payload, &buffers).ok());
  EXPECT_EQ(payload, base.payload);
}

TEST(WeightDeltaTest, SmallUpdatesCompressFarBelowTheVersion) {
  DeltaBuffers buffers;
  // An optimizer step moves every float32 weight by about 1e-3 of itself: the sign, the
  // exponent and the top mantissa bits stay, so the XOR's high byte planes are almost all zero.
  const core::PublishedWeights base = floats(1 << 18, 7);
  core::PublishedWeights next = base;
  std::vector<float> v = as_floats(base.payload);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0, 1e-3f);
  for (float& x : v) x *= 1 + normal(rng);
  next.payload.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  auto delta = encode_weight_delta(base, next, {1, 1}, &buffers);
  ASSERT_TRUE(delta.ok());
  EXPECT_LT(delta->size(), base.payload.size() * 7 / 10) << delta->size();
  std::string payload = base.payload;
  ASSERT_TRUE(apply_weight_delta(*delta, base.tensors, &payload, &buffers).ok());
  EXPECT_EQ(payload, next.payload);
  auto threaded = encode_weight_delta(base, next, {1, 2}, &buffers);  // one tensor, 2 threads
  ASSERT_TRUE(threaded.ok());
  payload = base.payload;
  ASSERT_TRUE(apply_weight_delta(*threaded, base.tensors, &payload, &buffers).ok());
  EXPECT_EQ(payload, next.payload);
  // The same XOR without the byte planes compresses worse: they are what makes it small.
  core::PublishedWeights bytes_base = base, bytes_next = next;
  bytes_base.tensors.clear();  // no tensors: the payload is plain bytes, one plane
  bytes_next.tensors.clear();
  auto unplaned = encode_weight_delta(bytes_base, bytes_next, {1, 1}, &buffers);
  ASSERT_TRUE(unplaned.ok());
  EXPECT_GT(unplaned->size(), delta->size() * 11 / 10)
      << unplaned->size() << " vs " << delta->size();
}

TEST(WeightDeltaTest, AnotherLayoutHasNoDelta) {
  DeltaBuffers buffers;
  const core::PublishedWeights base = mixed(1);
  core::PublishedWeights next = mixed(2);
  next.tensors[1].shape = {1000, 3};
  auto delta = encode_weight_delta(base, next, {1, 1}, &buffers);
  EXPECT_EQ(delta.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(delta.status().message()), HasSubstr("another layout"));
  EXPECT_FALSE(same_layout(base.tensors, next.tensors));
  next = mixed(2);
  next.payload.pop_back();
  EXPECT_FALSE(encode_weight_delta(base, next, {1, 1}, &buffers).ok());
}

TEST(WeightDeltaTest, ABadDeltaIsDataLossAndLeavesThePayloadAlone) {
  DeltaBuffers buffers;
  const core::PublishedWeights base = mixed(1);
  core::PublishedWeights next = mixed(2);
  next.tensors = base.tensors;
  auto delta = encode_weight_delta(base, next, {1, 1}, &buffers);
  ASSERT_TRUE(delta.ok());
  for (const std::string& bad :
       {delta->substr(0, delta->size() / 2), std::string("not zstd at all"), std::string()}) {
    std::string payload = base.payload;
    const absl::Status s = apply_weight_delta(bad, base.tensors, &payload, &buffers);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(payload, base.payload);
  }
  // Made for a payload of another size.
  std::string shorter = base.payload.substr(1);
  const absl::Status s = apply_weight_delta(*delta, {}, &shorter, &buffers);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("10013 bytes"));
}

}  // namespace
}  // namespace flywheel::buffer
