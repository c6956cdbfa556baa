// Which GPUs the processes of `flywheel train` get (model.device cuda): one GPU per learner rank
// (NCCL refuses two ranks of one communicator on one GPU), then one per rollout worker while
// GPUs remain. Workers started by the launcher each see only their GPU (CUDA_VISIBLE_DEVICES);
// the learner job sees the learners' GPUs, local rank r on the r-th. In an MPMD job (weights
// over mpi / nccl) the workers are ranks of the learners' mpirun and take the GPUs after the
// learners' by local rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::launcher {

struct GpuPlacementRequest {
  int64_t learners = 1;
  int64_t workers = 1;
  std::vector<std::string> visible;  // the GPU ids the launcher may hand out, in order
  bool mpmd = false;                 // the workers are ranks of the learners' mpirun
  bool nccl_weights = false;         // weight_sync.transport nccl: learner 0 and workers in one
                                     // NCCL group
};

struct GpuPlacement {
  std::string learners;              // CUDA_VISIBLE_DEVICES of the learner job (the MPMD job)
  std::vector<std::string> workers;  // CUDA_VISIBLE_DEVICES of each launched worker (not MPMD)
  std::string note;                  // how the GPUs were shared, for the launcher's log
};

// FailedPrecondition naming the counts when no GPU is visible, when there are fewer GPUs than
// learner ranks, or (nccl weights in an MPMD job) fewer than learners + workers. Workers beyond
// the GPUs left share them round-robin (said in `note`).
absl::StatusOr<GpuPlacement> place_on_gpus(const GpuPlacementRequest& request);

// The GPU ids of this machine the launcher may use: CUDA_VISIBLE_DEVICES' entries when it is
// set, else 0 .. count - 1.
std::vector<std::string> visible_gpus(const char* cuda_visible_devices, int count);

}  // namespace flywheel::launcher
