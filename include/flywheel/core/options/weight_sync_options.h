// `weight_sync:` — broadcasting new policy weights from the learners to rollout workers.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// weight_sync.transport.
enum class WeightTransport { kAuto, kNccl, kMpi, kGrpc };
absl::Span<const ChoiceName<WeightTransport>> choice_names(WeightTransport);

// weight_sync.delta: when rollout workers receive versions as deltas of the one they hold.
enum class WeightDelta { kAuto, kOn, kOff };
absl::Span<const ChoiceName<WeightDelta>> choice_names(WeightDelta);

struct WeightSyncOptions {
  WeightTransport transport = WeightTransport::kAuto;
  int64_t bucket_bytes = 16 << 20;  // bytes per bucket on the wire
  int64_t every_steps = 1;          // publish after every N optimizer steps
  double timeout_s = 300.0;
  WeightDelta delta = WeightDelta::kAuto;  // grpc: zstd-compressed XOR deltas of the last
  int64_t delta_level = 1;                 // zstd level of the deltas
  int64_t delta_threads = 1;               // threads that encode them
};

void bind_options(FieldBinder& b, WeightSyncOptions& o);

// Whether a worker that reaches its controller at `controller_address` (HOST:PORT) asks for
// deltas: on, or auto and the host is not a loopback address (where copying is cheaper than
// encoding).
bool wants_weight_deltas(const WeightSyncOptions& o, const std::string& controller_address);

// How weights travel: transport with auto resolved (to grpc); never kAuto.
WeightTransport weight_transport(const WeightSyncOptions& o);

}  // namespace flywheel::core
