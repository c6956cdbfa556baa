// decode_group (wire_codec.h): a TrajectoryGroup read from protobuf's bytes, validated as it is
// read.
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
#include "wire_fields.h"

namespace flywheel::buffer {
namespace {

using google::protobuf::io::CodedInputStream;

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
    return packed(out);
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
    return packed(out);
  }

  // The packed form of a repeated fixed-width field: its elements' little-endian bytes in a
  // row (a length that is no multiple of the width is malformed); appends.
  template <typename T>
  bool packed(std::vector<T>* out) {
    uint32_t n;
    if (!length(&n) || n % sizeof(T) != 0) return false;
    const size_t old = out->size();
    out->resize(old + n / sizeof(T));
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

}  // namespace flywheel::buffer
