// The MPI weight channel under mpirun (2 and 3 ranks): rank 0 sends versions, every other rank
// receives them byte for byte with their manifests; a version with a wrong checksum or a bad
// manifest is refused with the channel still working for the next one; close reaches every
// receiver; malformed headers are errors, never crashes.
#include "flywheel/comm/weight_channel.h"
#include "flywheel/core/crc32c.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "../trainer/mpi_test_main.h"
#include "gtest/gtest.h"

namespace flywheel::comm {
namespace {

using Received = WeightChannel::Received;

// `floats` float32 values (a byte pattern of `version`) in tensors of `per_tensor` elements, the
// last one holding the rest.
core::PublishedWeights make_weights(int64_t version, int64_t floats, int64_t per_tensor,
                                    uint64_t bucket_bytes) {
  core::PublishedWeights w;
  w.version = version;
  w.bucket_bytes = bucket_bytes;
  w.payload.resize(static_cast<size_t>(floats) * 4);
  for (size_t i = 0; i < w.payload.size(); ++i) {
    w.payload[i] = static_cast<char>((i * 131 + static_cast<size_t>(version) * 7) & 0xff);
  }
  for (int64_t at = 0, t = 0; at < floats; at += per_tensor, ++t) {
    const int64_t n = std::min(per_tensor, floats - at);
    w.tensors.push_back({"layers." + std::to_string(t) + ".weight",
                         "F32",
                         {n},
                         static_cast<uint64_t>(at) * 4,
                         static_cast<uint64_t>(n) * 4});
  }
  w.crc32c = core::crc32c_extend(0, w.payload.data(), w.payload.size());
  return w;
}

// Polls until something other than kNothing arrives.
absl::StatusOr<Received> receive_next(WeightChannel& channel, core::PublishedWeights* into) {
  while (true) {
    absl::StatusOr<Received> r = channel.receive(into);
    if (!r.ok() || *r != Received::kNothing) return r;
  }
}

void expect_same(const core::PublishedWeights& got, const core::PublishedWeights& sent) {
  EXPECT_EQ(got.version, sent.version);
  EXPECT_EQ(got.crc32c, sent.crc32c);
  EXPECT_EQ(got.bucket_bytes, sent.bucket_bytes);
  ASSERT_EQ(got.payload.size(), sent.payload.size());
  EXPECT_TRUE(got.payload == sent.payload) << "payload bytes differ (v" << sent.version << ")";
  ASSERT_EQ(got.tensors.size(), sent.tensors.size());
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].name, sent.tensors[i].name);
    EXPECT_EQ(got.tensors[i].dtype, sent.tensors[i].dtype);
    EXPECT_EQ(got.tensors[i].shape, sent.tensors[i].shape);
    EXPECT_EQ(got.tensors[i].offset, sent.tensors[i].offset);
    EXPECT_EQ(got.tensors[i].size, sent.tensors[i].size);
  }
}

TEST(WeightChannelTest, HeaderRoundTripsAndMalformedHeadersAreErrors) {
  const core::PublishedWeights w = make_weights(5, 1000, 300, 1024);
  const std::string header = WeightChannel::encode_header(w);
  core::PublishedWeights decoded;
  absl::StatusOr<uint64_t> bytes = WeightChannel::decode_header(header, &decoded);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, w.payload.size());
  decoded.payload = w.payload;
  expect_same(decoded, w);
  // Every truncation and every extra byte is refused.
  for (size_t n = 0; n < header.size(); ++n) {
    core::PublishedWeights out;
    EXPECT_FALSE(WeightChannel::decode_header(header.substr(0, n), &out).ok()) << n;
  }
  core::PublishedWeights out;
  EXPECT_FALSE(WeightChannel::decode_header(header + "x", &out).ok());
  std::string bad_magic = header;
  bad_magic[0] = 'X';
  EXPECT_FALSE(WeightChannel::decode_header(bad_magic, &out).ok());
  // A name length far past the message.
  std::string long_name = header;
  const uint32_t huge = 1u << 31;
  std::memcpy(&long_name[40], &huge, sizeof(huge));
  absl::StatusOr<uint64_t> r = WeightChannel::decode_header(long_name, &out);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST(WeightChannelTest, ReceiversGetEveryVersionExactly) {
  auto world = testing::world_communicator();
  WeightChannel channel(world.get(), world.get());
  // Buckets that divide the payload, that do not, and one larger than the payload.
  const core::PublishedWeights sent[] = {make_weights(1, 4096, 1000, 4096),
                                         make_weights(2, 10001, 777, 3000),
                                         make_weights(3, 50, 50, 1 << 20)};
  core::PublishedWeights into;  // reused, as the worker does
  for (const core::PublishedWeights& w : sent) {
    if (channel.rank() == 0) {
      channel.send(w);
    } else {
      absl::StatusOr<Received> r = receive_next(channel, &into);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(*r, Received::kWeights);
      expect_same(into, w);
    }
  }
  if (channel.rank() != 0) {
    absl::StatusOr<Received> none = channel.receive(&into);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, Received::kNothing);  // nothing more was sent
  }
  world->barrier();
}

TEST(WeightChannelTest, DamagedVersionsAreRefusedAndTheNextArrives) {
  auto world = testing::world_communicator();
  WeightChannel channel(world.get(), world.get());
  core::PublishedWeights wrong_crc = make_weights(7, 3000, 1000, 2048);
  wrong_crc.crc32c ^= 1;
  core::PublishedWeights bad_manifest = make_weights(8, 3000, 1000, 2048);
  bad_manifest.tensors.back().size += 4;  // runs past the payload
  const core::PublishedWeights good = make_weights(9, 3000, 1000, 2048);
  core::PublishedWeights into;
  if (channel.rank() == 0) {
    channel.send(wrong_crc);
    channel.send(bad_manifest);
    channel.send(good);
    channel.close();
    EXPECT_TRUE(channel.closed());
  } else {
    absl::StatusOr<Received> r = receive_next(channel, &into);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    r = receive_next(channel, &into);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    r = receive_next(channel, &into);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(*r, Received::kWeights);
    expect_same(into, good);
    r = receive_next(channel, &into);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, Received::kClosed);
    EXPECT_TRUE(channel.closed());
    r = channel.receive(&into);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, Received::kClosed);
  }
  world->barrier();
}

}  // namespace
}  // namespace flywheel::comm

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
