#include "flywheel/buffer/wire_codec.h"

#include <climits>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wire_codec copies fixed32 arrays as they are in memory: little-endian hosts only"
#endif

namespace flywheel::buffer {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

// Protobuf wire types.
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Field numbers of flywheel/v1/trajectory.proto.
enum GroupField {
  kGroupId = 1,
  kLeaseId = 2,
  kWorkerId = 3,
  kTrajectories = 4,
  kBaselineReward = 5,
  kPromptIndex = 6,
  kEnvErrors = 7
};
enum TrajectoryField {
  kPromptIds = 1,
  kResponseIds = 2,
  kLossMask = 3,
  kLogprobs = 4,
  kVersions = 5,
  kReward = 6,
  kRewardBreakdown = 7,
  kFinishReason = 8,
  kSampleIndex = 9,
  kTurnEnds = 10,
  kTurnRewards = 11,
  kToolCalls = 12,
  kEnvStepSeconds = 13,
  kSegment = 14,
  kStepEnds = 15,
  kStepRewards = 16,
  kRoutes = 17,
  kRouteLayers = 18,
  kRouteK = 19,
  kRouteBytes = 20,
};

constexpr int kMaxGroupDepth = 64;

class Reader {
 public:
  explicit Reader(CodedInputStream* in) : in_(in) {}

  // The next tag, or 0 at the end of the current message; at_end() then tells a clean end
  // from a malformed tag. Tags are read as protobuf's parser reads them: at most 5 bytes, bits
  // past 32 dropped, zero invalid.
  uint32_t next_tag() {
    if (in_->BytesUntilLimit() <= 0) return 0;
    uint32_t tag = 0;
    for (int i = 0; i < 5; ++i) {
      uint8_t byte;
      if (!in_->ReadRaw(&byte, 1)) break;
      tag |= static_cast<uint32_t>(byte & 0x7F) << (7 * i);
      if (byte < 0x80) {
        if (tag == 0) break;
        return tag;
      }
    }
    malformed_ = true;
    return 0;
  }
  bool at_end() const { return !malformed_ && in_->BytesUntilLimit() == 0; }

  bool skip(uint32_t tag, int depth = 0) {
    switch (tag & 7) {
      case kVarint: {
        uint64_t v;
        return in_->ReadVarint64(&v);
      }
      case kFixed64:
        return in_->Skip(8);
      case kLengthDelimited: {
        uint32_t n;
        return length(&n) && in_->Skip(static_cast<int>(n));
      }
      case kStartGroup: {
        if (depth >= kMaxGroupDepth) return false;
        while (true) {
          const uint32_t inner = next_tag();
          if ((inner >> 3) == 0) return false;
          if ((inner & 7) == kEndGroup) return (inner >> 3) == (tag >> 3);
          if (!skip(inner, depth + 1)) return false;
        }
      }
      case kFixed32:
        return in_->Skip(4);
      default:
        return false;
    }
  }

  // Length of a length-delimited field, read as protobuf's parser reads sizes (at most 5
  // bytes, below 2^31) and checked against what is left of the message.
  bool length(uint32_t* n) {
    *n = 0;
    for (int i = 0; i < 5; ++i) {
      uint8_t byte;
      if (!in_->ReadRaw(&byte, 1) || (i == 4 && byte >= 8)) return false;
      *n |= static_cast<uint32_t>(byte & 0x7F) << (7 * i);
      if (byte < 0x80) return static_cast<int64_t>(*n) <= in_->BytesUntilLimit();
    }
    return false;
  }

  // The field readers below take the tag just read. A field whose wire type is not the
  // schema's is skipped as an unknown field, as protobuf does.

  // A repeated 4-byte field (fixed32 or float), packed or one element at a time; appends.
  template <typename T>
  bool fixed32s(uint32_t tag, std::vector<T>* out) {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
    if ((tag & 7) == kFixed32) {
      uint32_t bits;
      if (!in_->ReadLittleEndian32(&bits)) return false;
      T value;
      std::memcpy(&value, &bits, 4);
      out->push_back(value);
      return true;
    }
    if ((tag & 7) != kLengthDelimited) return skip(tag);
    uint32_t n;
    if (!length(&n) || n % 4 != 0) return false;
    const size_t old = out->size();
    out->resize(old + n / 4);
    return in_->ReadRaw(out->data() + old, static_cast<int>(n));
  }

  // A repeated double, packed or one element at a time; appends.
  bool doubles(uint32_t tag, std::vector<double>* out) {
    if ((tag & 7) == kFixed64) {
      double value;
      if (!double_value(tag, &value)) return false;
      out->push_back(value);
      return true;
    }
    if ((tag & 7) != kLengthDelimited) return skip(tag);
    uint32_t n;
    if (!length(&n) || n % 8 != 0) return false;
    const size_t old = out->size();
    out->resize(old + n / 8);
    return in_->ReadRaw(out->data() + old, static_cast<int>(n));
  }

  bool bytes(uint32_t tag, std::vector<uint8_t>* out) {
    if ((tag & 7) != kLengthDelimited) return skip(tag);
    uint32_t n;
    if (!length(&n)) return false;
    out->resize(n);
    return in_->ReadRaw(out->data(), static_cast<int>(n));
  }

  bool string(uint32_t tag, std::string* out) {
    if ((tag & 7) != kLengthDelimited) return skip(tag);
    uint32_t n;
    return length(&n) && in_->ReadString(out, static_cast<int>(n)) && core::is_valid_utf8(*out);
  }

  template <typename Int>
  bool varint(uint32_t tag, Int* out) {
    if ((tag & 7) != kVarint) return skip(tag);
    uint64_t v;
    if (!in_->ReadVarint64(&v)) return false;
    *out = static_cast<Int>(v);
    return true;
  }

  bool double_value(uint32_t tag, double* out) {
    if ((tag & 7) != kFixed64) return skip(tag);
    uint64_t bits;
    if (!in_->ReadLittleEndian64(&bits)) return false;
    std::memcpy(out, &bits, 8);
    return true;
  }

  // Runs `body` inside a length-delimited submessage; false when it fails or leaves bytes.
  template <typename Body>
  bool submessage(Body&& body) {
    uint32_t n;
    if (!length(&n)) return false;
    const CodedInputStream::Limit outer = in_->PushLimit(static_cast<int>(n));
    const bool ok = body() && at_end();
    in_->PopLimit(outer);
    return ok;
  }

 private:
  CodedInputStream* in_;
  bool malformed_ = false;
};

bool read_breakdown_entry(Reader& r, std::map<std::string, double>* breakdown) {
  std::string key;
  double value = 0;
  for (uint32_t tag; (tag = r.next_tag()) != 0;) {
    const uint32_t number = tag >> 3;
    const bool ok = number == 1   ? r.string(tag, &key)
                    : number == 2 ? r.double_value(tag, &value)
                                  : number != 0 && r.skip(tag);
    if (!ok) return false;
  }
  if (!r.at_end()) return false;
  (*breakdown)[key] = value;
  return true;
}

const char* trajectory_field_name(uint32_t number) {
  switch (number) {
    case kPromptIds:
      return "prompt_ids";
    case kResponseIds:
      return "response_ids";
    case kLossMask:
      return "loss_mask";
    case kLogprobs:
      return "logprobs";
    case kVersions:
      return "versions";
    case kReward:
      return "reward";
    case kRewardBreakdown:
      return "reward_breakdown";
    case kFinishReason:
      return "finish_reason";
    case kSampleIndex:
      return "sample_index";
    case kTurnEnds:
      return "turn_ends";
    case kTurnRewards:
      return "turn_rewards";
    case kToolCalls:
      return "tool_calls";
    case kEnvStepSeconds:
      return "env_step_seconds";
    case kSegment:
      return "segment";
    case kStepEnds:
      return "step_ends";
    case kStepRewards:
      return "step_rewards";
    case kRoutes:
      return "routes";
    case kRouteLayers:
      return "route_layers";
    case kRouteK:
      return "route_k";
    case kRouteBytes:
      return "route_bytes";
    default:
      return "an unknown field";
  }
}

// Reads one Trajectory; on failure `field` names the field being read.
bool read_trajectory(Reader& r, Trajectory* t, const char** field) {
  for (uint32_t tag; (tag = r.next_tag()) != 0;) {
    const uint32_t number = tag >> 3;
    bool ok;
    switch (number) {
      case kPromptIds:
        ok = r.fixed32s(tag, &t->prompt_ids);
        break;
      case kResponseIds:
        ok = r.fixed32s(tag, &t->response_ids);
        break;
      case kLossMask:
        ok = r.bytes(tag, &t->loss_mask);
        break;
      case kLogprobs:
        ok = r.fixed32s(tag, &t->logprobs);
        break;
      case kVersions:
        ok = r.fixed32s(tag, &t->versions);
        break;
      case kReward:
        ok = r.double_value(tag, &t->reward);
        break;
      case kRewardBreakdown:
        ok = (tag & 7) == kLengthDelimited
                 ? r.submessage([&] { return read_breakdown_entry(r, &t->reward_breakdown); })
                 : r.skip(tag);
        break;
      case kFinishReason:
        ok = r.string(tag, &t->finish_reason);
        break;
      case kSampleIndex:
        ok = r.varint(tag, &t->sample_index);
        break;
      case kTurnEnds:
        ok = r.fixed32s(tag, &t->turn_ends);
        break;
      case kTurnRewards:
        ok = r.doubles(tag, &t->turn_rewards);
        break;
      case kToolCalls:
        ok = r.varint(tag, &t->tool_calls);
        break;
      case kEnvStepSeconds:
        ok = r.fixed32s(tag, &t->env_step_seconds);
        break;
      case kSegment:
        ok = r.varint(tag, &t->segment);
        break;
      case kStepEnds:
        ok = r.fixed32s(tag, &t->step_ends);
        break;
      case kStepRewards:
        ok = r.doubles(tag, &t->step_rewards);
        break;
      case kRoutes:
        ok = r.bytes(tag, &t->routes);
        break;
      case kRouteLayers:
        ok = r.varint(tag, &t->route_layers);
        break;
      case kRouteK:
        ok = r.varint(tag, &t->route_k);
        break;
      case kRouteBytes:
        ok = r.varint(tag, &t->route_bytes);
        break;
      default:
        ok = number != 0 && r.skip(tag);
    }
    if (!ok) {
      *field = trajectory_field_name(number);
      return false;
    }
  }
  *field = "the end of the trajectory";
  return r.at_end();
}

// --- encoding -------------------------------------------------------------------------------

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

absl::Status decode_group(google::protobuf::io::ZeroCopyInputStream* input, size_t size,
                          const DecodeLimits& limits, TrajectoryGroup* group) {
  auto bad = [](const std::string& where) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse flywheel.v1.TrajectoryGroup: malformed ", where));
  };
  if (size > INT_MAX) return bad("message (over 2 GiB)");
  CodedInputStream in(input);
  in.SetTotalBytesLimit(INT_MAX);
  in.PushLimit(static_cast<int>(size));
  Reader r(&in);
  TrajectoryGroup& g = *group;
  g = TrajectoryGroup();
  for (uint32_t tag; (tag = r.next_tag()) != 0;) {
    const uint32_t number = tag >> 3;
    bool ok;
    switch (number) {
      case kGroupId:
        ok = r.string(tag, &g.group_id);
        break;
      case kLeaseId:
        ok = r.varint(tag, &g.lease_id);
        break;
      case kWorkerId:
        ok = r.string(tag, &g.worker_id);
        break;
      case kBaselineReward:
        // A value of another wire type is skipped (unknown-field rules), not taken.
        if ((tag & 7) == kFixed64) g.has_baseline = true;
        ok = r.double_value(tag, &g.baseline_reward);
        break;
      case kPromptIndex:
        ok = r.varint(tag, &g.prompt_index);
        break;
      case kEnvErrors:
        ok = r.varint(tag, &g.env_errors);
        break;
      case kTrajectories: {
        if ((tag & 7) != kLengthDelimited) {
          ok = r.skip(tag);
          break;
        }
        if (static_cast<int64_t>(g.trajectories.size()) >= limits.max_trajectories) {
          return absl::InvalidArgumentError(absl::StrCat(
              "trajectories: more than ", limits.max_trajectories, " trajectories in one group"));
        }
        const char* inner = "trajectories";
        g.trajectories.emplace_back();
        if (!r.submessage([&] { return read_trajectory(r, &g.trajectories.back(), &inner); })) {
          return bad(absl::StrCat("trajectories[", g.trajectories.size() - 1, "].", inner));
        }
        ok = true;
        break;
      }
      default:
        ok = number != 0 && r.skip(tag);
    }
    if (!ok) {
      const char* names[] = {"unknown field", "group_id",        "lease_id",    "worker_id",
                             "trajectories",  "baseline_reward", "prompt_index"};
      return bad(names[number <= kPromptIndex ? number : 0]);
    }
  }
  if (!r.at_end()) return bad("message (truncated, or a zero tag)");
  return absl::OkStatus();
}

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
