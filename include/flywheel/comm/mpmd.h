// Roles in one MPI job. `mpirun -np N flywheel learner c.yaml : -np M flywheel rollout c.yaml`
// starts learners and rollout workers in one MPI_COMM_WORLD; each process joins with its role,
// the world is split into one communicator per role, and learner rank 0 (which must be world
// rank 0: list the learners first) tells every process the controller's address.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/comm/weight_channel.h"
#include "flywheel/core/config.h"

namespace flywheel::comm {

enum class Role { kLearner = 0, kRollout = 1 };

struct MpmdWorld {
  std::unique_ptr<comm::Communicator> world;
  std::unique_ptr<comm::Communicator> role;  // the processes of this role
};

// Collective over the world. FailedPrecondition when learner rank 0 is not world rank 0.
// The options of a group named `name`: cluster.collective_timeout_s, and each rank's progress
// records in <logging.run_dir>/progress (a timeout then names the ranks that never arrived).
CommunicatorOptions collective_options(const std::string& name, const core::Config& config);

absl::StatusOr<MpmdWorld> join_mpmd_world(const comm::MpiRuntime& runtime, Role role,
                                          const core::Config& config);

// The weight channel of an MPMD job (weight_sync.transport mpi or nccl): learner rank 0 sends,
// every rollout rank receives. Learners other than rank 0 take part in forming it only (channel
// null).
struct WeightGroup {
  std::unique_ptr<comm::Communicator> control;  // MPI: learner rank 0 + the rollout ranks
  std::unique_ptr<comm::Communicator> nccl;     // the same ranks over NCCL (transport nccl)
  std::unique_ptr<comm::WeightChannel> channel;
};

// Collective over the world (every learner and rollout rank, after join_mpmd_world).
// `cuda_device` is this process's GPU for transport nccl. FailedPrecondition when the job has no
// rollout ranks (the workers were started without mpirun: use grpc).
absl::StatusOr<WeightGroup> join_weight_group(MpmdWorld& world, Role role,
                                              const core::Config& config, int cuda_device);

// This process's CUDA device: its local rank on the node (OMPI_COMM_WORLD_LOCAL_RANK, else
// `fallback`) modulo the GPUs visible. -1 without a GPU.
int local_cuda_device(int fallback);

// True when this process was started by an MPI launcher (mpirun, srun --mpi).
bool launched_by_mpi();

// The learners' NCCL communicator (bootstrapped over the learners' MPI one; one GPU per rank by
// local rank) when cluster.backend is nccl, or auto with model.device cuda; null otherwise.
// FailedPrecondition for nccl without a GPU.
absl::StatusOr<std::unique_ptr<comm::Communicator>> learner_nccl(const MpmdWorld& world,
                                                                 const core::Config& config);

}  // namespace flywheel::comm
