// The protobuf wire types and flywheel/v1/trajectory.proto's field numbers that wire_decode.cc
// and wire_encode.cc (wire_codec.h) read and write by hand. Private to src/buffer.
#pragma once

#include <cstdint>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wire_codec copies fixed32 arrays as they are in memory: little-endian hosts only"
#endif

namespace flywheel::buffer {

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

}  // namespace flywheel::buffer
