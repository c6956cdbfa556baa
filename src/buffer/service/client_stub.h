// What the controller client's files share (controller_client.cc, controller_client_weights.cc):
// its stubs and small helpers.
#pragma once

#include <chrono>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "client_push_call.h"
#include "client_weights_call.h"
#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "weight_wire.h"

namespace flywheel::buffer {

struct ControllerClient::Stub {
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : stub(v1::Controller::NewStub(channel)), generic(channel), weights(channel) {}
  std::unique_ptr<v1::Controller::Stub> stub;
  PushStub generic;     // PushGroups, whose requests wire_codec writes
  WeightsStub weights;  // StreamWeights, whose replies weights_call reads
};

// gRPC's status as absl's (the codes are the same numbers).
inline absl::Status from_grpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

using SystemClock = std::chrono::system_clock;

// A deadline `s` seconds from now.
inline SystemClock::time_point after_seconds(double s) {
  return SystemClock::now() + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

// GetWeightsManifest's answer before the first publication (not an unreachable controller).
inline bool no_weights_yet(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(s.message(), kNoWeightsYet);
}

}  // namespace flywheel::buffer
