#include "flywheel/core/options/cluster_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<ThreadSplit>> choice_names(ThreadSplit) {
  static constexpr ChoiceName<ThreadSplit> kNames[] = {{ThreadSplit::kAuto, "auto"},
                                                       {ThreadSplit::kKernels, "kernels"},
                                                       {ThreadSplit::kBlas, "blas"},
                                                       {ThreadSplit::kAten, "aten"}};
  return kNames;
}

absl::Span<const ChoiceName<CommBackend>> choice_names(CommBackend) {
  static constexpr ChoiceName<CommBackend> kNames[] = {
      {CommBackend::kAuto, "auto"}, {CommBackend::kMpi, "mpi"}, {CommBackend::kNccl, "nccl"}};
  return kNames;
}

void bind_options(FieldBinder& b, ClusterOptions& o) {
  b.field("num_learners", &o.num_learners,
          FieldInfo("Learner MPI ranks started by `flywheel train`.").min(1));
  b.field("controller_address", &o.controller_address,
          FieldInfo("HOST:PORT of the controller for `flywheel rollout` when --controller is not "
                    "given (workers started on their own). Empty: --controller is required, "
                    "except in an MPMD mpirun and under `flywheel train`, which pass it."));
  b.field("threads_per_process", &o.threads_per_process,
          FieldInfo("Thread budget of each process, given to flywheel's kernels, "
                    "LibTorch's intra-op pool or the BLAS library's pool as "
                    "cluster.thread_split says.")
              .min(1));
  b.choice("thread_split", &o.thread_split,
           FieldInfo("How rollout workers split threads_per_process: auto picks kernels where "
                     "flywheel's kernels run the dtype (float32 and bfloat16: AVX2 or "
                     "AVX-512), else blas for float32 and aten for bfloat16; kernels runs "
                     "flywheel's projection kernels on all of them "
                     "and LibTorch and OpenBLAS on 1; blas runs LibTorch's intra-op pool on 1 "
                     "thread and OpenBLAS on all of them (float32 GEMMs); aten runs LibTorch on "
                     "all of them and OpenBLAS on 1. Without a settable BLAS (no "
                     "openblas_set_num_threads in the process) LibTorch gets all of them except "
                     "under kernels. Learners run LibTorch on all of them."));
  b.choice("backend", &o.backend,
           FieldInfo("Learner collectives: mpi on CPU, nccl on GPU; auto picks by device."));
  b.field("collective_timeout_s", &o.collective_timeout_s,
          FieldInfo("A collective that takes longer is an error, never a hang.").greater_than(0));
  b.field("max_worker_restarts", &o.max_worker_restarts,
          FieldInfo("`flywheel train` restarts a rollout worker that crashes up to this many "
                    "times (one that fails while starting, up to 2 times); when no worker is "
                    "left running the run stops with an error naming their last log lines.")
              .min(0));
}

}  // namespace flywheel::core
