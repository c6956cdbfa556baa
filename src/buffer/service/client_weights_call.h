// One StreamWeights call of the controller client (see client_weights_call.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "flywheel/v1/controller.pb.h"

namespace flywheel::buffer {

using WeightsStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>;

// A version's payload as it arrives: buckets are written in place at their offsets.
struct WeightsTransfer {
  int64_t version = 0;
  uint64_t bucket_bytes = 1;
  std::string* payload = nullptr;  // sized to the manifest's total_bytes
  std::vector<uint32_t> crcs;      // per bucket: the received bytes' CRC-32C
  std::vector<char> bad;           // per bucket: its bytes did not match the sent checksum
  // Test only: called on each bucket's bytes before they are checked.
  const std::function<void(uint64_t, char*, size_t)>* corrupt = nullptr;
};

// Runs one StreamWeights call for `request` (its version, offset, length) on `context` and
// blocks until it ends. Buckets must arrive in order from request.offset(); each is copied
// straight from gRPC's buffers into the payload and checksummed on the way (bad ones are marked
// in `transfer->bad`, not errors). `*received_to` is the end of the last bucket received, also
// when the call fails. DataLoss when the server sends something other than the expected bucket.
absl::Status stream_weights_once(WeightsStub* stub, grpc::ClientContext* context,
                                 const v1::WeightsRequest& request, WeightsTransfer* transfer,
                                 uint64_t* received_to);

}  // namespace flywheel::buffer
