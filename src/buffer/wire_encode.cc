// encoded_size, encode_group and encode_group_segments (wire_codec.h): a TrajectoryGroup in
// protobuf's bytes.
#include "flywheel/buffer/wire_codec.h"

#include <climits>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include "absl/strings/str_cat.h"
#include "wire_fields.h"

namespace flywheel::buffer {
namespace {

using google::protobuf::io::CodedOutputStream;

uint32_t tag(uint32_t field, WireType type) { return field << 3 | type; }

uint64_t bits_of(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  return bits;
}

// Where the encoder's bytes go: small pieces are always copied; token arrays (`array`) may be
// referenced in place instead.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void bytes(const void* data, size_t n) = 0;
  virtual void array(const void* data, size_t n) { bytes(data, n); }

  void varint(uint64_t v) {
    uint8_t buf[10];
    bytes(buf, CodedOutputStream::WriteVarint64ToArray(v, buf) - buf);
  }
  void fixed64(uint64_t v) {
    uint8_t buf[8];
    CodedOutputStream::WriteLittleEndian64ToArray(v, buf);
    bytes(buf, 8);
  }
  // A length-delimited field; proto3 leaves out empty ones.
  void delimited(uint32_t field, const void* data, size_t n, bool is_array = false) {
    if (n == 0) return;
    varint(tag(field, kLengthDelimited));
    varint(n);
    if (is_array) {
      array(data, n);
    } else {
      bytes(data, n);
    }
  }

  // A submessage that `write(Sink*)` writes, prefixed by its size (written once to count).
  template <typename Write>
  void submessage(uint32_t field, Write&& write);
};

class CountingSink final : public Sink {
 public:
  void bytes(const void*, size_t n) override { count += n; }
  size_t count = 0;
};

template <typename Write>
void Sink::submessage(uint32_t field, Write&& write) {
  CountingSink size;
  write(&size);
  varint(tag(field, kLengthDelimited));
  varint(size.count);
  write(this);
}

void write_trajectory(const Trajectory& t, Sink* out) {
  out->delimited(kPromptIds, t.prompt_ids.data(), t.prompt_ids.size() * 4, true);
  out->delimited(kResponseIds, t.response_ids.data(), t.response_ids.size() * 4, true);
  out->delimited(kLossMask, t.loss_mask.data(), t.loss_mask.size(), true);
  out->delimited(kLogprobs, t.logprobs.data(), t.logprobs.size() * 4, true);
  out->delimited(kVersions, t.versions.data(), t.versions.size() * 4, true);
  if (bits_of(t.reward) != 0) {
    out->varint(tag(kReward, kFixed64));
    out->fixed64(bits_of(t.reward));
  }
  for (const auto& [key, value] : t.reward_breakdown) {
    out->submessage(kRewardBreakdown, [&](Sink* entry) {
      // Map entries always carry both key and value, as protobuf writes them.
      entry->varint(tag(1, kLengthDelimited));
      entry->varint(key.size());
      entry->bytes(key.data(), key.size());
      entry->varint(tag(2, kFixed64));
      entry->fixed64(bits_of(value));
    });
  }
  out->delimited(kFinishReason, t.finish_reason.data(), t.finish_reason.size());
  if (t.sample_index != 0) {
    out->varint(tag(kSampleIndex, kVarint));
    out->varint(static_cast<uint64_t>(t.sample_index));
  }
  out->delimited(kTurnEnds, t.turn_ends.data(), t.turn_ends.size() * 4);
  out->delimited(kTurnRewards, t.turn_rewards.data(), t.turn_rewards.size() * 8);
  if (t.tool_calls != 0) {
    out->varint(tag(kToolCalls, kVarint));
    out->varint(static_cast<uint64_t>(static_cast<int64_t>(t.tool_calls)));  // as protobuf does
  }
  out->delimited(kEnvStepSeconds, t.env_step_seconds.data(), t.env_step_seconds.size() * 4);
  if (t.segment != 0) {
    out->varint(tag(kSegment, kVarint));
    out->varint(static_cast<uint64_t>(static_cast<int64_t>(t.segment)));
  }
  out->delimited(kStepEnds, t.step_ends.data(), t.step_ends.size() * 4);
  out->delimited(kStepRewards, t.step_rewards.data(), t.step_rewards.size() * 8);
  out->delimited(kRoutes, t.routes.data(), t.routes.size(), true);
  if (t.route_layers != 0) {
    out->varint(tag(kRouteLayers, kVarint));
    out->varint(static_cast<uint64_t>(static_cast<int64_t>(t.route_layers)));
  }
  if (t.route_k != 0) {
    out->varint(tag(kRouteK, kVarint));
    out->varint(static_cast<uint64_t>(static_cast<int64_t>(t.route_k)));
  }
  if (t.route_bytes != 0) {
    out->varint(tag(kRouteBytes, kVarint));
    out->varint(static_cast<uint64_t>(static_cast<int64_t>(t.route_bytes)));
  }
}

void write_group(const TrajectoryGroup& group, absl::string_view worker_id, Sink* out) {
  out->delimited(kGroupId, group.group_id.data(), group.group_id.size());
  if (group.lease_id != 0) {
    out->varint(tag(kLeaseId, kVarint));
    out->varint(group.lease_id);
  }
  out->delimited(kWorkerId, worker_id.data(), worker_id.size());
  for (const Trajectory& t : group.trajectories) {
    out->submessage(kTrajectories, [&](Sink* s) { write_trajectory(t, s); });
  }
  if (group.has_baseline) {
    out->varint(tag(kBaselineReward, kFixed64));
    out->fixed64(bits_of(group.baseline_reward));
  }
  if (group.prompt_index != -1) {
    out->varint(tag(kPromptIndex, kVarint));
    out->varint(static_cast<uint64_t>(group.prompt_index));
  }
  if (group.env_errors != 0) {
    out->varint(tag(kEnvErrors, kVarint));
    out->varint(static_cast<uint64_t>(group.env_errors));
  }
}

class ArraySink final : public Sink {
 public:
  explicit ArraySink(uint8_t* out) : p_(out) {}
  void bytes(const void* data, size_t n) override {
    std::memcpy(p_, data, n);
    p_ += n;
  }

 private:
  uint8_t* p_;
};

// Arrays of at least kMinReferencedBytes are referenced; everything else goes to `scratch`.
class SegmentSink final : public Sink {
 public:
  static constexpr size_t kMinReferencedBytes = 4096;

  explicit SegmentSink(std::string* scratch) : scratch_(scratch) { scratch_->clear(); }

  void bytes(const void* data, size_t n) override {
    if (n == 0) return;
    if (segments_.empty() || segments_.back().external != nullptr) {
      segments_.push_back({nullptr, scratch_->size(), 0});
    }
    scratch_->append(static_cast<const char*>(data), n);
    segments_.back().size += n;
  }
  void array(const void* data, size_t n) override {
    if (n < kMinReferencedBytes) return bytes(data, n);
    segments_.push_back({static_cast<const uint8_t*>(data), 0, n});
  }

  std::vector<WireSegment> take() { return std::move(segments_); }

 private:
  std::string* scratch_;
  std::vector<WireSegment> segments_;
};

}  // namespace

size_t encoded_size(const TrajectoryGroup& group, absl::string_view worker_id) {
  CountingSink sink;
  write_group(group, worker_id, &sink);
  return sink.count;
}

void encode_group(const TrajectoryGroup& group, absl::string_view worker_id, uint8_t* out) {
  ArraySink sink(out);
  write_group(group, worker_id, &sink);
}

std::vector<WireSegment> encode_group_segments(const TrajectoryGroup& group,
                                               absl::string_view worker_id, std::string* scratch) {
  SegmentSink sink(scratch);
  write_group(group, worker_id, &sink);
  return sink.take();
}

}  // namespace flywheel::buffer
