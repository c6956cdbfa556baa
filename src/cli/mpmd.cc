#include "mpmd.h"

#include <cstdlib>

#include <ATen/ATen.h>

namespace flywheel::cli {

absl::StatusOr<MpmdWorld> join_mpmd_world(const comm::MpiRuntime& runtime, Role role,
                                          const core::Config& config) {
  MpmdWorld out;
  auto world =
      comm::MpiCommunicator::world(runtime, {"world", config.cluster.collective_timeout_s});
  if (!world.ok()) return world.status();
  out.world = std::move(*world);
  const int color = static_cast<int>(role);
  auto split = out.world->split(color, out.world->rank(),
                                role == Role::kLearner ? "learners" : "rollout workers");
  if (!split.ok()) return split.status();
  out.role = std::move(*split);
  // Learner rank 0 hosts the controller and broadcasts on the world from world rank 0.
  const bool leader = role == Role::kLearner && out.role->rank() == 0;
  at::Tensor where = at::full({2}, 0, at::kLong);
  where[0] = leader ? out.world->rank() : 0;
  where[1] = role == Role::kLearner ? 1 : 0;
  out.world->all_reduce_host(where, comm::ReduceOp::kSum);
  if (where[1].item<int64_t>() == 0) {
    return absl::FailedPreconditionError(
        "this MPI job has no `flywheel learner` ranks: rollout ranks need learners in the same "
        "mpirun, or run them without mpirun with --controller HOST:PORT");
  }
  if (where[0].item<int64_t>() != 0) {
    return absl::FailedPreconditionError(
        "learner rank 0 must be world rank 0: list `flywheel learner` first in the MPMD "
        "command line");
  }
  return out;
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

}  // namespace flywheel::cli
