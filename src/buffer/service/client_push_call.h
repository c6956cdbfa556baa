// One PushGroups stream of the controller client (see client_push_call.cc).
#pragma once

#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "flywheel/buffer/trajectory.h"
#include "flywheel/v1/controller.grpc.pb.h"

namespace flywheel::buffer {

using PushStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PushAck>;

// Streams `groups` over one PushGroups call on `context` and blocks until the call ends; the
// acks received are appended to `acks` in order (the server acknowledges in the order sent, so
// ack i answers groups[i]; acks do not always echo the group id), also when the call then fails.
grpc::Status push_over_one_stream(PushStub* stub, grpc::ClientContext* context,
                                  std::vector<const TrajectoryGroup*> groups,
                                  const std::string& worker_id, std::vector<v1::PushAck>* acks);

}  // namespace flywheel::buffer
