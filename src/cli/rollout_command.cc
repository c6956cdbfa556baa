// `flywheel rollout CONFIG --controller HOST:PORT`: one rollout worker (generation engine,
// rewards, weight updates) serving the controller until every prompt is done, the controller
// goes away, or SIGINT / SIGTERM. Under an MPMD mpirun with the learners, --controller may be
// left out: learner rank 0 sends its address. The worker is jobs::run_rollout_worker; this file
// parses the command line.
#include <iostream>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/jobs/rollout_job.h"
#include "flywheel/launcher/launcher.h"

namespace flywheel::cli {
namespace {

struct RolloutArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  jobs::RolloutJobOptions job;
};

absl::Status run(const RolloutArgs& args, bool* serving) {
  core::StopSignal stop("flywheel rollout");
  absl::StatusOr<jobs::JobSetup> job = jobs::set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  return jobs::run_rollout_worker(
      *job, args.job, [&stop] { return stop.requested(); }, serving);
}

}  // namespace

void add_rollout_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RolloutArgs>();
  CLI::App* command = app.add_subcommand(
      "rollout",
      "A rollout worker: generates and scores groups for the controller's prompts and applies "
      "the learners' weights as they are published");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option(
      "--controller", args->job.controller,
      "HOST:PORT of the controller (learner rank 0); optional under an MPMD mpirun");
  command->add_option("--worker-id", args->job.worker_id,
                      "This worker's id (default: HOST-PID, or rollout-RANK under mpirun)");
  command->add_option("--log-file", args->job.log_file,
                      "Append this worker's output to this file ({rank} is replaced by its rank "
                      "among the rollout ranks of an MPMD mpirun, else 0)");
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    bool serving = false;
    absl::Status status = run(*args, &serving);
    if (!status.ok()) std::cerr << "flywheel rollout: " << status.message() << "\n";
    *exit_code = !status.ok() && !serving ? launcher::kExitStartFailure : exit_code_for(status);
  });
}

}  // namespace flywheel::cli
