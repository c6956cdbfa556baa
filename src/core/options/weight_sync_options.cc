#include "flywheel/core/options/weight_sync_options.h"

#include <string_view>

namespace flywheel::core {

absl::Span<const ChoiceName<WeightTransport>> choice_names(WeightTransport) {
  static constexpr ChoiceName<WeightTransport> kNames[] = {{WeightTransport::kAuto, "auto"},
                                                           {WeightTransport::kNccl, "nccl"},
                                                           {WeightTransport::kMpi, "mpi"},
                                                           {WeightTransport::kGrpc, "grpc"}};
  return kNames;
}

absl::Span<const ChoiceName<WeightDelta>> choice_names(WeightDelta) {
  static constexpr ChoiceName<WeightDelta> kNames[] = {
      {WeightDelta::kAuto, "auto"}, {WeightDelta::kOn, "on"}, {WeightDelta::kOff, "off"}};
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
  b.choice("delta", &o.delta,
           FieldInfo("transport grpc: a rollout worker that holds the version before the newest "
                     "receives the newest as the XOR of the two, byte planes apart, compressed "
                     "with zstd (exact; checked by the whole version's crc32c, fetched whole "
                     "when it fails; the controller encodes each delta once). on, off, or auto: "
                     "workers that reach the controller over the network ask for deltas, those "
                     "on its loopback do not (copying is cheaper than encoding there). See "
                     "docs/controller.md for when they pay."));
  b.field("delta_level", &o.delta_level,
          FieldInfo("zstd level of weight_sync.delta (1 fastest; higher levels shrink float32 "
                    "deltas little and cost the controller seconds on large models).")
              .min(1)
              .max(19));
  b.field("delta_threads", &o.delta_threads,
          FieldInfo("Threads the controller (learner rank 0) encodes each delta with: the XOR "
                    "and byte-plane pass and zstd. Its cores are the learner's; more threads "
                    "shorten the encoding that delays the first worker's fetch of a version.")
              .min(1)
              .max(64));
}

bool wants_weight_deltas(const WeightSyncOptions& o, const std::string& controller_address) {
  if (o.delta != WeightDelta::kAuto) return o.delta == WeightDelta::kOn;
  std::string_view host(controller_address);
  if (host.substr(0, 5) == "unix:") return false;  // a socket on this machine
  if (const size_t colon = host.rfind(':');
      colon != std::string_view::npos && host.find(']') == std::string_view::npos) {
    host = host.substr(0, colon);
  } else if (host.size() > 1 && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);
  }
  return !(host == "localhost" || host == "::1" || host.substr(0, 4) == "127.");
}

WeightTransport weight_transport(const WeightSyncOptions& o) {
  return o.transport == WeightTransport::kAuto ? WeightTransport::kGrpc : o.transport;
}

}  // namespace flywheel::core
