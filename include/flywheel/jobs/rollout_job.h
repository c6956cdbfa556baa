// One rollout worker (`flywheel rollout`): generation engine, rewards and weight updates,
// serving the controller until every prompt is done, the controller goes away, or `stop`.
// This assembles the pieces from the config (model, engine, scoring pool, environment, agents,
// weight source); the loop is rollout::RolloutWorker's.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "flywheel/jobs/job_setup.h"

namespace flywheel::jobs {

struct RolloutJobOptions {
  std::string controller;  // HOST:PORT; empty: the MPMD job's learner rank 0, else
                           // cluster.controller_address
  std::string worker_id;   // empty: HOST-PID, or rollout-RANK under mpirun
  std::string log_file;    // append stdout and stderr here ("{rank}": the rollout rank); empty: no
};

// Joins the MPMD job when launched by mpirun, registers with the controller, builds the worker
// for the dtype the learners publish and runs it. Sets *serving once the worker loop runs: a
// failure before that is a start failure. Prints the worker's counters to stderr at the end.
absl::Status run_rollout_worker(const JobSetup& job, const RolloutJobOptions& args,
                                const std::function<bool()>& stop, bool* serving);

}  // namespace flywheel::jobs
