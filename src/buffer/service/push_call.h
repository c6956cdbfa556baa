// One PushGroups stream of the controller client (see push_call.cc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "flywheel/buffer/trajectory.h"
#include "flywheel/v1/controller.grpc.pb.h"

namespace flywheel::buffer {

using PushStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PushAck>;

// Streams `groups` over one PushGroups call on `context` and blocks until the call ends; every
// ack received is stored in `acks` by group id (also when the call then fails).
grpc::Status push_over_one_stream(PushStub* stub, grpc::ClientContext* context,
                                  std::vector<const TrajectoryGroup*> groups,
                                  const std::string& worker_id,
                                  std::map<std::string, v1::PushAck>* acks);

}  // namespace flywheel::buffer
