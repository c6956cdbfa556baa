// wire_codec against protobuf itself: encode_group() must produce the bytes protobuf's
// deterministic serialization produces, and decode_group() must accept exactly what protobuf's
// parser accepts and read the same values, including from randomly corrupted messages and from
// input split into chunks at every boundary.
#include "flywheel/buffer/wire_codec.h"

#include "group_message.h"

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "flywheel/v1/trajectory.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::buffer {
namespace {

using google::protobuf::io::ArrayInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using ::testing::HasSubstr;

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// Field-by-field equality, bitwise for floating point (NaN payloads and -0.0 included).
void expect_same(const TrajectoryGroup& a, const TrajectoryGroup& b) {
  EXPECT_EQ(a.group_id, b.group_id);
  EXPECT_EQ(a.lease_id, b.lease_id);
  EXPECT_EQ(a.worker_id, b.worker_id);
  EXPECT_EQ(a.has_baseline, b.has_baseline);
  EXPECT_EQ(a.prompt_index, b.prompt_index);
  EXPECT_TRUE(same_double(a.baseline_reward, b.baseline_reward));
  ASSERT_EQ(a.trajectories.size(), b.trajectories.size());
  for (size_t i = 0; i < a.trajectories.size(); ++i) {
    const Trajectory &x = a.trajectories[i], &y = b.trajectories[i];
    EXPECT_EQ(x.prompt_ids, y.prompt_ids);
    EXPECT_EQ(x.response_ids, y.response_ids);
    EXPECT_EQ(x.loss_mask, y.loss_mask);
    EXPECT_TRUE(same_bits(x.logprobs, y.logprobs)) << "trajectory " << i;
    EXPECT_EQ(x.versions, y.versions);
    EXPECT_TRUE(same_double(x.reward, y.reward)) << x.reward << " vs " << y.reward;
    ASSERT_EQ(x.reward_breakdown.size(), y.reward_breakdown.size());
    for (const auto& [k, v] : x.reward_breakdown) {
      ASSERT_TRUE(y.reward_breakdown.count(k)) << k;
      EXPECT_TRUE(same_double(v, y.reward_breakdown.at(k)));
    }
    EXPECT_EQ(x.finish_reason, y.finish_reason);
    EXPECT_EQ(x.sample_index, y.sample_index);
    EXPECT_EQ(x.turn_ends, y.turn_ends);
    ASSERT_EQ(x.turn_rewards.size(), y.turn_rewards.size());
    for (size_t k = 0; k < x.turn_rewards.size(); ++k) {
      EXPECT_TRUE(same_double(x.turn_rewards[k], y.turn_rewards[k]));
    }
    EXPECT_EQ(x.tool_calls, y.tool_calls);
    EXPECT_TRUE(same_bits(x.env_step_seconds, y.env_step_seconds));
    EXPECT_EQ(x.segment, y.segment);
    EXPECT_EQ(x.step_ends, y.step_ends);
    ASSERT_EQ(x.step_rewards.size(), y.step_rewards.size());
    for (size_t k = 0; k < x.step_rewards.size(); ++k) {
      EXPECT_TRUE(same_double(x.step_rewards[k], y.step_rewards[k]));
    }
    EXPECT_EQ(x.routes, y.routes);
    EXPECT_EQ(x.route_layers, y.route_layers);
    EXPECT_EQ(x.route_k, y.route_k);
    EXPECT_EQ(x.route_bytes, y.route_bytes);
  }
  EXPECT_EQ(a.env_errors, b.env_errors);
}

TrajectoryGroup random_group(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  TrajectoryGroup g;
  g.group_id = pick(5) == 0 ? "" : "group-" + std::to_string(rng());
  g.lease_id = pick(4) == 0 ? 0 : (static_cast<uint64_t>(rng()) << pick(33));
  g.worker_id = "ignored: the encoder's worker_id wins";
  const int n = pick(5);
  for (int i = 0; i < n; ++i) {
    Trajectory t;
    const int prompt = pick(4) == 0 ? 0 : pick(300);
    const int response = pick(4) == 0 ? 0 : pick(300);
    for (int k = 0; k < prompt; ++k) t.prompt_ids.push_back(static_cast<int32_t>(rng()));
    for (int k = 0; k < response; ++k) {
      t.response_ids.push_back(static_cast<int32_t>(rng() % 1000));
      t.loss_mask.push_back(static_cast<uint8_t>(rng() % 3));
      t.logprobs.push_back(-std::ldexp(static_cast<float>(rng() % 1000), -pick(12)));
      t.versions.push_back(pick(10) == 0 ? -1 : pick(1000));
    }
    const double rewards[] = {0.0, -0.0, 1.0, -2.5, 1e300, std::nan("")};
    t.reward = rewards[pick(6)];
    for (int k = pick(4); k > 0; --k) t.reward_breakdown["r" + std::to_string(pick(5))] = pick(7);
    if (pick(3) == 0) t.reward_breakdown[""] = 0;  // empty key and zero value
    t.finish_reason = pick(3) == 0 ? "" : "stop \xC3\xA9";
    t.sample_index = pick(3) == 0 ? 0 : static_cast<int64_t>(rng()) - (1LL << 31);
    if (pick(2) == 0) {  // an episode's fields, unvalidated: any values travel
      for (int k = pick(4); k > 0; --k) {
        t.turn_ends.push_back(static_cast<int32_t>(rng()));
        t.turn_rewards.push_back(rewards[pick(6)]);
        t.env_step_seconds.push_back(std::ldexp(static_cast<float>(rng() % 1000), -pick(12)));
      }
      t.tool_calls = pick(3) == 0 ? -pick(3) : pick(4);  // negative int32: a 10-byte varint
    }
    if (pick(3) == 0) t.segment = pick(3) == 0 ? -pick(3) : pick(5);  // an agent's segment
    for (int k = pick(2) == 0 ? pick(5) : 0; k > 0; --k) {  // process rewards, unvalidated
      t.step_ends.push_back(static_cast<int32_t>(rng()));
      t.step_rewards.push_back(rewards[pick(6)]);
    }
    if (pick(3) == 0) {  // a mixture-of-experts model's routes, unvalidated: any values travel
      t.route_layers = pick(3) == 0 ? -pick(3) : pick(4);  // negative: a 10-byte varint
      t.route_k = pick(4);
      t.route_bytes = pick(3);
      for (int k = pick(2) == 0 ? pick(200) : 0; k > 0; --k) t.routes.push_back(rng());
    }
    g.trajectories.push_back(std::move(t));
  }
  if (pick(2) == 0) g.env_errors = pick(3) == 0 ? 0 : static_cast<int64_t>(rng() >> 1);
  if (pick(2) == 0) g.prompt_index = pick(3) == 0 ? 0 : static_cast<int64_t>(rng() >> 1);
  if (pick(3) == 0) {
    g.has_baseline = true;
    const double baselines[] = {0.0, -0.0, 0.5, -1.0};
    g.baseline_reward = baselines[pick(4)];
  }
  return g;
}

std::string encode(const TrajectoryGroup& g, const std::string& worker_id) {
  std::string bytes(encoded_size(g, worker_id), '\0');
  encode_group(g, worker_id, reinterpret_cast<uint8_t*>(bytes.data()));
  return bytes;
}

std::string protobuf_bytes(const v1::TrajectoryGroup& p) {
  std::string bytes;
  StringOutputStream stream(&bytes);
  CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  p.SerializeToCodedStream(&out);
  out.Trim();
  return bytes;
}

absl::Status decode(const std::string& bytes, TrajectoryGroup* g, int block = -1,
                    const DecodeLimits& limits = {}) {
  ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()), block);
  return decode_group(&stream, bytes.size(), limits, g);
}

TEST(WireCodecTest, EncodesTheBytesProtobufSerializes) {
  std::mt19937 rng(1);
  for (int i = 0; i < 500; ++i) {
    const TrajectoryGroup g = random_group(rng);
    const std::string worker = i % 3 == 0 ? "" : "worker-" + std::to_string(i);
    ASSERT_EQ(encode(g, worker), protobuf_bytes(to_message(g, worker))) << "case " << i;
  }
}

TEST(WireCodecTest, SegmentsConcatenateToTheEncodingAndReferenceLargeArrays) {
  std::mt19937 rng(4);
  int referenced = 0;
  for (int i = 0; i < 300; ++i) {
    TrajectoryGroup g = random_group(rng);
    if (!g.trajectories.empty() && i % 2 == 0) {  // arrays above the 4 KiB threshold
      Trajectory& t = g.trajectories[0];
      t.response_ids.resize(5000 + i, 3);
      t.logprobs.resize(5000 + i, -1.0f);
      t.versions.resize(5000 + i, 2);
      t.loss_mask.resize(20000 + i, 1);
      t.routes.resize(30000 + i, 0xFF);
    }
    std::string scratch;
    const std::vector<WireSegment> segments = encode_group_segments(g, "w", &scratch);
    std::string joined;
    for (const WireSegment& s : segments) {
      ASSERT_GT(s.size, 0u);
      if (s.external != nullptr) {
        joined.append(reinterpret_cast<const char*>(s.external), s.size);
        ++referenced;
        bool inside_the_group = false;  // an array of the group itself, not a copy
        for (const Trajectory& t : g.trajectories) {
          for (const void* data : {static_cast<const void*>(t.prompt_ids.data()),
                                   static_cast<const void*>(t.response_ids.data()),
                                   static_cast<const void*>(t.loss_mask.data()),
                                   static_cast<const void*>(t.logprobs.data()),
                                   static_cast<const void*>(t.versions.data()),
                                   static_cast<const void*>(t.routes.data())}) {
            inside_the_group |= data == s.external;
          }
        }
        EXPECT_TRUE(inside_the_group);
      } else {
        ASSERT_LE(s.offset + s.size, scratch.size());
        joined.append(scratch, s.offset, s.size);
      }
    }
    ASSERT_EQ(joined, encode(g, "w")) << "case " << i;
  }
  EXPECT_GT(referenced, 200);
}

TEST(WireCodecTest, DecodesWhatProtobufSerializesAtAnyChunking) {
  std::mt19937 rng(2);
  for (int i = 0; i < 500; ++i) {
    const v1::TrajectoryGroup message = to_message(random_group(rng), "w");
    const std::string bytes = message.SerializeAsString();
    for (int block : {-1, 1, 3, 4, 4096}) {
      TrajectoryGroup decoded;
      ASSERT_TRUE(decode(bytes, &decoded, block).ok()) << "case " << i << " block " << block;
      expect_same(decoded, from_message(message));
    }
  }
}

// Mixture-of-experts routes (fields 17 to 20) travel as protobuf writes and reads them; a
// malformed routes field is named.
TEST(WireCodecTest, RoundTripsExpertRoutesAndNamesAMalformedRoutesField) {
  TrajectoryGroup g;
  g.group_id = "g";
  g.worker_id = "w";  // as decoded: the encoder writes its worker_id argument
  g.trajectories.resize(2);
  Trajectory& t = g.trajectories[0];
  t.prompt_ids = {1, 2};
  t.response_ids = {3};
  t.route_layers = 2;
  t.route_k = 1;
  t.route_bytes = 2;
  t.routes = {0x05, 0x00, 0x34, 0x12, 0x00, 0x01, 0x02, 0x00, 0xFF, 0xFF, 0xFF, 0xFF};
  const std::string bytes = encode(g, "w");
  ASSERT_EQ(bytes, protobuf_bytes(to_message(g, "w")));
  TrajectoryGroup decoded;
  ASSERT_TRUE(decode(bytes, &decoded).ok());
  expect_same(decoded, g);
  EXPECT_EQ(decoded.trajectories[0].route_id(1), 0x1234);
  EXPECT_EQ(decoded.trajectories[0].route_id(5), -1);
  EXPECT_TRUE(decoded.trajectories[1].routes.empty());
  EXPECT_EQ(decoded.trajectories[1].route_bytes, 0);

  std::string truncated;  // a routes field whose length runs past its trajectory
  {
    StringOutputStream stream(&truncated);
    CodedOutputStream out(&stream);
    out.WriteTag(4 << 3 | 2);
    out.WriteVarint32(5);
    out.WriteTag(17 << 3 | 2);  // two tag bytes, a length byte and two of the five bytes
    out.WriteVarint32(5);
    out.WriteRaw("ab", 2);
  }
  v1::TrajectoryGroup reference;
  EXPECT_FALSE(reference.ParseFromString(truncated));
  const absl::Status s = decode(truncated, &decoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trajectories[0].routes"));
}

// Encodings protobuf's own serializer never produces but its parser accepts.
TEST(WireCodecTest, AcceptsUnpackedSplitReorderedAndUnknownFields) {
  std::string bytes;
  {
    StringOutputStream stream(&bytes);
    CodedOutputStream out(&stream);
    std::string trajectory;
    {
      StringOutputStream ts(&trajectory);
      CodedOutputStream t(&ts);
      t.WriteTag(9 << 3 | 0);  // sample_index before the ids
      t.WriteVarint64(7);
      for (uint32_t id : {5u, 6u}) {  // response_ids one at a time (unpacked)
        t.WriteTag(2 << 3 | 5);
        t.WriteLittleEndian32(id);
      }
      t.WriteTag(2 << 3 | 2);  // ... then a packed run: ids append
      t.WriteVarint32(4);
      t.WriteLittleEndian32(8);
      t.WriteTag(99 << 3 | 0);  // unknown fields of every wire type
      t.WriteVarint64(123456789);
      t.WriteTag(100 << 3 | 1);
      t.WriteLittleEndian64(1);
      t.WriteTag(101 << 3 | 2);
      t.WriteVarint32(3);
      t.WriteRaw("abc", 3);
      t.WriteTag(102 << 3 | 3);  // a group holding a varint
      t.WriteTag(1 << 3 | 0);
      t.WriteVarint64(1);
      t.WriteTag(102 << 3 | 4);
      t.WriteTag(103 << 3 | 5);
      t.WriteLittleEndian32(1);
      t.WriteTag(6 << 3 | 0);  // reward with the wrong wire type: an unknown field
      t.WriteVarint64(5);
      t.WriteTag(8 << 3 | 2);  // finish_reason twice: the last wins
      t.WriteVarint32(1);
      t.WriteRaw("a", 1);
      t.WriteTag(8 << 3 | 2);
      t.WriteVarint32(4);
      t.WriteRaw("stop", 4);
    }
    out.WriteTag(4 << 3 | 2);
    out.WriteVarint32(static_cast<uint32_t>(trajectory.size()));
    out.WriteRaw(trajectory.data(), static_cast<int>(trajectory.size()));
    out.WriteTag(1 << 3 | 2);  // group_id after the trajectories
    out.WriteVarint32(2);
    out.WriteRaw("g1", 2);
    out.WriteTag(5 << 3 | 0);  // baseline_reward with the wrong wire type: unknown, not present
    out.WriteVarint64(3);
  }
  v1::TrajectoryGroup reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  TrajectoryGroup decoded;
  ASSERT_TRUE(decode(bytes, &decoded).ok());
  expect_same(decoded, from_message(reference));
  EXPECT_EQ(decoded.trajectories.at(0).response_ids, (std::vector<int32_t>{5, 6, 8}));
  EXPECT_EQ(decoded.trajectories.at(0).finish_reason, "stop");
  EXPECT_EQ(decoded.trajectories.at(0).reward, 0);
  EXPECT_FALSE(decoded.has_baseline);
}

// Random corruption: decode_group fails exactly when protobuf's parser fails, and reads the
// same values when both succeed.
TEST(WireCodecTest, AgreesWithProtobufOnCorruptedMessages) {
  google::protobuf::LogSilencer quiet;  // protobuf logs each invalid UTF-8 string it rejects
  std::mt19937 rng(3);
  int rejected = 0, accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = to_message(random_group(rng), "w").SerializeAsString();
    if (bytes.empty()) continue;
    switch (rng() % 4) {
      case 0:  // truncate
        bytes.resize(rng() % bytes.size());
        break;
      case 1:  // flip a few bytes
        for (int k = 0; k < 3; ++k)
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 2:  // set one byte to a random value
        bytes[rng() % bytes.size()] = static_cast<char>(rng());
        break;
      default:  // insert random bytes
        bytes.insert(rng() % bytes.size(), std::string(1 + rng() % 4, static_cast<char>(rng())));
    }
    v1::TrajectoryGroup reference;
    const bool protobuf_ok = reference.ParseFromString(bytes);
    TrajectoryGroup decoded;
    const absl::Status s = decode(bytes, &decoded, 1 + static_cast<int>(rng() % 64));
    ASSERT_EQ(s.ok(), protobuf_ok) << "case " << i << ": " << s;
    if (protobuf_ok) {
      expect_same(decoded, from_message(reference));
      ++accepted;
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr("cannot parse flywheel.v1.TrajectoryGroup"));
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);  // both outcomes were exercised
  EXPECT_GT(accepted, 1000);
}

TEST(WireCodecTest, RejectsBadStringsAndTooManyTrajectoriesNamingTheField) {
  TrajectoryGroup g;
  g.group_id = "g7";
  g.trajectories.resize(1);
  g.trajectories[0].finish_reason = "bad \xC0\x80";
  TrajectoryGroup decoded;
  absl::Status s = decode(encode(g, "w"), &decoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trajectories[0].finish_reason"));
  EXPECT_EQ(decoded.group_id, "g7");  // read before the error, for the acknowledgement

  g.trajectories.resize(5);
  g.trajectories[0].finish_reason = "stop";
  DecodeLimits limits;
  limits.max_trajectories = 4;
  s = decode(encode(g, "w"), &decoded, -1, limits);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than 4 trajectories"));
  limits.max_trajectories = 5;
  EXPECT_TRUE(decode(encode(g, "w"), &decoded, -1, limits).ok());
}

}  // namespace
}  // namespace flywheel::buffer
