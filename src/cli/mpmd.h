// Roles in one MPI job. `mpirun -np N flywheel learner c.yaml : -np M flywheel rollout c.yaml`
// starts learners and rollout workers in one MPI_COMM_WORLD; each process joins with its role,
// the world is split into one communicator per role, and learner rank 0 (which must be world
// rank 0: list the learners first) tells every process the controller's address.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/core/config.h"

namespace flywheel::cli {

enum class Role { kLearner = 0, kRollout = 1 };

struct MpmdWorld {
  std::unique_ptr<comm::Communicator> world;
  std::unique_ptr<comm::Communicator> role;  // the processes of this role
};

// Collective over the world. FailedPrecondition when learner rank 0 is not world rank 0.
absl::StatusOr<MpmdWorld> join_mpmd_world(const comm::MpiRuntime& runtime, Role role,
                                          const core::Config& config);

// True when this process was started by an MPI launcher (mpirun, srun --mpi).
bool launched_by_mpi();

}  // namespace flywheel::cli
