// `weight_sync:` — broadcasting new policy weights from the learners to rollout workers.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct WeightSyncOptions {
  std::string transport = "auto";   // auto | nccl | mpi | grpc
  int64_t bucket_bytes = 16 << 20;  // bytes per bucket on the wire
  int64_t every_steps = 1;          // publish after every N optimizer steps
  double timeout_s = 300.0;
};

void bind_options(FieldBinder& b, WeightSyncOptions& o);

// How weights travel: "grpc", "mpi" or "nccl" (transport, with auto resolved to grpc).
std::string weight_transport(const WeightSyncOptions& o);

}  // namespace flywheel::core
