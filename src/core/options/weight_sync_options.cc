#include "flywheel/core/options/weight_sync_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, WeightSyncOptions& o) {
  b.field("transport", &o.transport,
          FieldInfo("How weights reach rollout workers; auto picks nccl on GPU, else grpc.")
              .one_of({"auto", "nccl", "mpi", "grpc"}));
  b.field("bucket_bytes", &o.bucket_bytes, FieldInfo("Bytes per bucket on the wire.").min(1024));
  b.field("every_steps", &o.every_steps,
          FieldInfo("Publish weights after every N optimizer steps.").min(1));
  b.field("timeout_s", &o.timeout_s,
          FieldInfo("Deadline of one publication in seconds.").greater_than(0));
}

}  // namespace flywheel::core
