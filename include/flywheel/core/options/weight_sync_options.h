// `weight_sync:` — broadcasting new policy weights from the learners to rollout workers.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// weight_sync.transport.
enum class WeightTransport { kAuto, kNccl, kMpi, kGrpc };
absl::Span<const ChoiceName<WeightTransport>> choice_names(WeightTransport);

struct WeightSyncOptions {
  WeightTransport transport = WeightTransport::kAuto;
  int64_t bucket_bytes = 16 << 20;  // bytes per bucket on the wire
  int64_t every_steps = 1;          // publish after every N optimizer steps
  double timeout_s = 300.0;
};

void bind_options(FieldBinder& b, WeightSyncOptions& o);

// How weights travel: transport with auto resolved (to grpc); never kAuto.
WeightTransport weight_transport(const WeightSyncOptions& o);

}  // namespace flywheel::core
