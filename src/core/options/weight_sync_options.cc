#include "flywheel/core/options/weight_sync_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<WeightTransport>> choice_names(WeightTransport) {
  static constexpr ChoiceName<WeightTransport> kNames[] = {{WeightTransport::kAuto, "auto"},
                                                           {WeightTransport::kNccl, "nccl"},
                                                           {WeightTransport::kMpi, "mpi"},
                                                           {WeightTransport::kGrpc, "grpc"}};
  return kNames;
}

void bind_options(FieldBinder& b, WeightSyncOptions& o) {
  b.choice("transport", &o.transport,
           FieldInfo("How weights reach rollout workers: grpc (buckets streamed through the "
                     "controller; any worker, elastic, restartable), mpi (learner rank 0 "
                     "broadcasts each version over MPI to the rollout ranks of the learners' MPMD "
                     "mpirun; CPU jobs), nccl (the same over NCCL, every rank on a GPU), or auto "
                     "(grpc). With mpi or nccl, flywheel train runs the workers inside the "
                     "learners' mpirun and a failed worker ends the job."));
  b.field("bucket_bytes", &o.bucket_bytes,
          FieldInfo("Bytes per bucket on the wire (smaller buckets overlap sending and "
                    "receiving better; see docs/controller.md).")
              .min(1024));
  b.field("every_steps", &o.every_steps,
          FieldInfo("Publish weights after every N optimizer steps.").min(1));
  b.field("timeout_s", &o.timeout_s,
          FieldInfo("Seconds a rollout worker waits for (or spends transferring) new weights "
                    "before it fails.")
              .greater_than(0));
}

WeightTransport weight_transport(const WeightSyncOptions& o) {
  return o.transport == WeightTransport::kAuto ? WeightTransport::kGrpc : o.transport;
}

}  // namespace flywheel::core
