// `flywheel learner CONFIG`: the RL learner job (run it under mpirun; `flywheel train` does).
// The job is jobs::run_rl_learner; this file parses the command line and ends every rank when
// one fails.
#include <iostream>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/jobs/rl_learner_job.h"

namespace flywheel::cli {
namespace {

struct LearnerArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

absl::Status run(const LearnerArgs& args) {
  core::StopSignal stop("flywheel learner");
  absl::StatusOr<jobs::JobSetup> job = jobs::set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::unique_ptr<comm::MpiRuntime>> mpi = comm::MpiRuntime::init(nullptr, nullptr);
  if (!mpi.ok()) return mpi.status();
  absl::Status s = jobs::run_rl_learner(*job, **mpi, [&stop] { return stop.requested(); });
  if (!s.ok() && (*mpi)->world_size() > 1) {
    // An error of one rank (often rank 0's, which hosts the controller) ends the whole job now
    // rather than leaving the others in a collective until its timeout.
    std::cerr << "flywheel learner: " << s.message() << std::endl;
    (*mpi)->abort(s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure);
  }
  return s;
}

}  // namespace

void add_learner_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LearnerArgs>();
  CLI::App* command = app.add_subcommand(
      "learner",
      "The RL learner job (under mpirun): rank 0 hosts the controller; every rank trains on the "
      "batches rollout workers fill");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel learner: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
