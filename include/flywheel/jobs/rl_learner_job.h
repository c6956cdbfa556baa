// One rank of the RL learner job (`flywheel learner`, which `flywheel train` runs under mpirun).
// Rank 0 hosts the controller (prompt leases, trajectory buffer, weight publication) on
// buffer.server.bind_address and writes the address to <run_dir>/controller_address; every rank
// trains on the batches rank 0 takes from the buffer (trainer::RlLoop); the policy version is the
// optimizer step count. Under an MPMD mpirun the rollout ranks get the controller's address over
// MPI. This assembles the pieces (learner, controller, weight publisher, held-out evaluation,
// checkpoints, metrics); the loop is the trainer's.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/jobs/job_setup.h"

namespace flywheel::jobs {

// Trains until trainer.total_steps, the prompts run out, or `stop` returns true (polled between
// steps), then checkpoints, exports (rank 0, checkpoint.export_hf) and prints the summary line.
// An error of any rank is returned; the caller ends the other ranks (MpiRuntime::abort).
absl::Status run_rl_learner(const JobSetup& job, comm::MpiRuntime& mpi,
                            const std::function<bool()>& stop);

}  // namespace flywheel::jobs
