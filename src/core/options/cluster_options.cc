#include "flywheel/core/options/cluster_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, ClusterOptions& o) {
  b.field("num_learners", &o.num_learners,
          FieldInfo("Learner MPI ranks started by `flywheel train`.").min(1));
  b.field("controller_address", &o.controller_address,
          FieldInfo("HOST:PORT of the controller for rollout workers. Empty: the local one."));
  b.field("threads_per_process", &o.threads_per_process,
          FieldInfo("Intra-op threads (LibTorch and OpenBLAS) of each process.").min(1));
  b.field("backend", &o.backend,
          FieldInfo("Learner collectives: mpi on CPU, nccl on GPU; auto picks by device.")
              .one_of({"auto", "mpi", "nccl"}));
  b.field("collective_timeout_s", &o.collective_timeout_s,
          FieldInfo("A collective that takes longer is an error, never a hang.").greater_than(0));
}

}  // namespace flywheel::core
