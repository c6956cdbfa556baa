#include "wire_codec.h"

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
enum GroupField { kGroupId = 1, kLeaseId = 2, kWorkerId = 3, kTrajectories = 4 };
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

  // A repeated 4-byte field (fixed32 or float), packed or one element at a time; appends.
  template <typename T>
  bool fixed32s(uint32_t wire_type, std::vector<T>* out) {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
    if (wire_type == kFixed32) {
      uint32_t bits;
      if (!in_->ReadLittleEndian32(&bits)) return false;
      T value;
      std::memcpy(&value, &bits, 4);
      out->push_back(value);
      return true;
    }
    uint32_t n;
    if (!length(&n) || n % 4 != 0) return false;
    const size_t old = out->size();
    out->resize(old + n / 4);
    return in_->ReadRaw(out->data() + old, static_cast<int>(n));
  }

  bool bytes(std::vector<uint8_t>* out) {
    uint32_t n;
    if (!length(&n)) return false;
    out->resize(n);
    return in_->ReadRaw(out->data(), static_cast<int>(n));
  }

  bool string(std::string* out) {
    uint32_t n;
    return length(&n) && in_->ReadString(out, static_cast<int>(n)) && core::is_valid_utf8(*out);
  }

  bool varint(uint64_t* out) { return in_->ReadVarint64(out); }

  bool fixed64(uint64_t* out) { return in_->ReadLittleEndian64(out); }

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

double to_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

bool read_breakdown_entry(Reader& r, std::map<std::string, double>* breakdown) {
  std::string key;
  double value = 0;
  for (uint32_t tag; (tag = r.next_tag()) != 0;) {
    const uint32_t field = tag >> 3, type = tag & 7;
    if (field == 0) return false;
    bool ok;
    if (field == 1 && type == kLengthDelimited) {
      ok = r.string(&key);
    } else if (field == 2 && type == kFixed64) {
      uint64_t bits;
      ok = r.fixed64(&bits);
      value = to_double(bits);
    } else {
      ok = r.skip(tag);
    }
    if (!ok) return false;
  }
  if (!r.at_end()) return false;
  (*breakdown)[key] = value;
  return true;
}

// Reads one Trajectory; on failure `field` names the field being read.
bool read_trajectory(Reader& r, Trajectory* t, const char** field) {
  for (uint32_t tag; (tag = r.next_tag()) != 0;) {
    const uint32_t number = tag >> 3, type = tag & 7;
    const bool packable = type == kLengthDelimited || type == kFixed32;
    bool ok;
    switch (number) {
      case kPromptIds:
        *field = "prompt_ids";
        ok = packable ? r.fixed32s(type, &t->prompt_ids) : r.skip(tag);
        break;
      case kResponseIds:
        *field = "response_ids";
        ok = packable ? r.fixed32s(type, &t->response_ids) : r.skip(tag);
        break;
      case kLossMask:
        *field = "loss_mask";
        ok = type == kLengthDelimited ? r.bytes(&t->loss_mask) : r.skip(tag);
        break;
      case kLogprobs:
        *field = "logprobs";
        ok = packable ? r.fixed32s(type, &t->logprobs) : r.skip(tag);
        break;
      case kVersions:
        *field = "versions";
        ok = packable ? r.fixed32s(type, &t->versions) : r.skip(tag);
        break;
      case kReward: {
        *field = "reward";
        uint64_t bits = 0;
        ok = type == kFixed64 ? r.fixed64(&bits) : r.skip(tag);
        if (type == kFixed64) t->reward = to_double(bits);
        break;
      }
      case kRewardBreakdown:
        *field = "reward_breakdown";
        ok = type == kLengthDelimited
                 ? r.submessage([&] { return read_breakdown_entry(r, &t->reward_breakdown); })
                 : r.skip(tag);
        break;
      case kFinishReason:
        *field = "finish_reason";
        ok = type == kLengthDelimited ? r.string(&t->finish_reason) : r.skip(tag);
        break;
      case kSampleIndex: {
        *field = "sample_index";
        uint64_t v = 0;
        ok = type == kVarint ? r.varint(&v) : r.skip(tag);
        if (type == kVarint) t->sample_index = static_cast<int64_t>(v);
        break;
      }
      default:
        *field = "an unknown field";
        ok = number != 0 && r.skip(tag);
    }
    if (!ok) return false;
  }
  *field = "the end of the trajectory";
  return r.at_end();
}

// --- encoding -------------------------------------------------------------------------------

uint32_t tag(uint32_t field, WireType type) { return field << 3 | type; }

size_t tag_size(uint32_t field) { return CodedOutputStream::VarintSize32(field << 3); }

// A length-delimited field of `n` bytes; proto3 leaves out empty ones.
size_t delimited_size(uint32_t field, size_t n) {
  return n == 0 ? 0 : tag_size(field) + CodedOutputStream::VarintSize32(n) + n;
}

uint64_t bits_of(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  return bits;
}

size_t breakdown_entry_size(const std::string& key) {
  // Map entries always carry both key and value, as protobuf writes them.
  return tag_size(1) + CodedOutputStream::VarintSize32(key.size()) + key.size() + tag_size(2) + 8;
}

size_t trajectory_size(const Trajectory& t) {
  size_t n = delimited_size(kPromptIds, t.prompt_ids.size() * 4) +
             delimited_size(kResponseIds, t.response_ids.size() * 4) +
             delimited_size(kLossMask, t.loss_mask.size()) +
             delimited_size(kLogprobs, t.logprobs.size() * 4) +
             delimited_size(kVersions, t.versions.size() * 4) +
             delimited_size(kFinishReason, t.finish_reason.size());
  if (bits_of(t.reward) != 0) n += tag_size(kReward) + 8;
  for (const auto& [key, value] : t.reward_breakdown) {
    const size_t entry = breakdown_entry_size(key);
    n += tag_size(kRewardBreakdown) + CodedOutputStream::VarintSize32(entry) + entry;
  }
  if (t.sample_index != 0) {
    n += tag_size(kSampleIndex) +
         CodedOutputStream::VarintSize64(static_cast<uint64_t>(t.sample_index));
  }
  return n;
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
};

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
    out->varint(tag(kRewardBreakdown, kLengthDelimited));
    out->varint(breakdown_entry_size(key));
    out->varint(tag(1, kLengthDelimited));
    out->varint(key.size());
    out->bytes(key.data(), key.size());
    out->varint(tag(2, kFixed64));
    out->fixed64(bits_of(value));
  }
  out->delimited(kFinishReason, t.finish_reason.data(), t.finish_reason.size());
  if (t.sample_index != 0) {
    out->varint(tag(kSampleIndex, kVarint));
    out->varint(static_cast<uint64_t>(t.sample_index));
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
    out->varint(tag(kTrajectories, kLengthDelimited));
    out->varint(trajectory_size(t));
    write_trajectory(t, out);
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
    const uint32_t number = tag >> 3, type = tag & 7;
    bool ok;
    const char* field = nullptr;
    switch (number) {
      case kGroupId:
        field = "group_id";
        ok = type == kLengthDelimited ? r.string(&g.group_id) : r.skip(tag);
        break;
      case kLeaseId:
        field = "lease_id";
        ok = type == kVarint ? r.varint(&g.lease_id) : r.skip(tag);
        break;
      case kWorkerId:
        field = "worker_id";
        ok = type == kLengthDelimited ? r.string(&g.worker_id) : r.skip(tag);
        break;
      case kTrajectories: {
        if (type != kLengthDelimited) {
          field = "trajectories";
          ok = r.skip(tag);
          break;
        }
        if (static_cast<int64_t>(g.trajectories.size()) >= limits.max_trajectories) {
          return absl::InvalidArgumentError(absl::StrCat(
              "trajectories: more than ", limits.max_trajectories, " trajectories in one group"));
        }
        const char* inner = "trajectories";
        g.trajectories.emplace_back();
        ok = r.submessage([&] { return read_trajectory(r, &g.trajectories.back(), &inner); });
        if (!ok) {
          return bad(absl::StrCat("trajectories[", g.trajectories.size() - 1, "].", inner));
        }
        break;
      }
      default:
        field = "unknown field";
        ok = number != 0 && r.skip(tag);
    }
    if (!ok) return bad(field);
  }
  if (!r.at_end()) return bad("message (truncated, or a zero tag)");
  return absl::OkStatus();
}

size_t encoded_size(const TrajectoryGroup& group, absl::string_view worker_id) {
  size_t n =
      delimited_size(kGroupId, group.group_id.size()) + delimited_size(kWorkerId, worker_id.size());
  if (group.lease_id != 0) {
    n += tag_size(kLeaseId) + CodedOutputStream::VarintSize64(group.lease_id);
  }
  for (const Trajectory& t : group.trajectories) {
    const size_t size = trajectory_size(t);
    n += tag_size(kTrajectories) + CodedOutputStream::VarintSize32(size) + size;
  }
  return n;
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
