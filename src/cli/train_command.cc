// `flywheel train CONFIG`: the one-machine launcher (launcher::Launcher) with threads per
// process chosen so that learners and workers do not oversubscribe the cores. `--resume RUN_DIR`
// continues a run from its last checkpoint with the command line it was started with.
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/launcher/launcher.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
  bool overwrite = false;
};

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

absl::Status run(const TrainArgs& args) {
  launcher::Launch launch;
  if (!args.resume.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(launcher::Launch previous, launcher::read_launch(args.resume));
    launch = previous;
    for (const std::string& o : args.overrides) launch.overrides.push_back(o);
  } else {
    if (args.config_path.empty()) {
      return absl::InvalidArgumentError("a CONFIG (or --resume RUN_DIR) is required");
    }
    launch.config = fs::absolute(args.config_path).string();
    launch.overrides = args.overrides;
  }
  std::vector<std::string> overrides = launch.overrides;
  if (!args.resume.empty()) {
    overrides.push_back("checkpoint.resume=auto");
    launch.overrides.push_back("checkpoint.resume=auto");
  }
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(launch.config, overrides));
  const core::Config& c = job.loaded.config;
  if (!args.resume.empty() &&
      fs::weakly_canonical(c.logging.run_dir) != fs::weakly_canonical(args.resume)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--resume ", args.resume, ": its config writes to ", c.logging.run_dir));
  }
  std::error_code ec;
  const fs::path checkpoints = c.checkpoint.dir.empty()
                                   ? fs::path(c.logging.run_dir) / "checkpoints"
                                   : fs::path(c.checkpoint.dir);
  if (args.resume.empty() && fs::exists(checkpoints, ec) && !fs::is_empty(checkpoints, ec)) {
    if (!args.overwrite) {
      return absl::FailedPreconditionError(absl::StrCat(
          c.logging.run_dir, " already holds a run: continue it with `flywheel train --resume ",
          c.logging.run_dir, "`, start over with --overwrite, or set logging.run_dir"));
    }
    fs::remove_all(c.logging.run_dir, ec);
    if (!c.checkpoint.dir.empty()) fs::remove_all(c.checkpoint.dir, ec);
  }

  // One thread per process unless the cores allow more: learners and workers run at once.
  const int cores = available_cores();
  const int processes = static_cast<int>(c.cluster.num_learners + c.rollout.num_workers);
  int threads = static_cast<int>(c.cluster.threads_per_process);
  if (threads * processes > cores && !job.loaded.is_set("cluster.threads_per_process")) {
    threads = std::max(1, cores / processes);
  }
  std::cerr << absl::StrFormat(
      "flywheel train: %d learner rank(s) + %d rollout worker(s), %d thread(s) each, on %d "
      "core(s)%s\n",
      c.cluster.num_learners, c.rollout.num_workers, threads, cores,
      threads * processes > cores ? " (more threads than cores: they share them)" : "");
  launcher::Launcher launcher(c, launch, threads);
  return launcher.run();
}

}  // namespace

void add_train_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* command = app.add_subcommand(
      "train",
      "Train with RL on this machine: the learner job (mpirun) and the rollout workers, with "
      "progress, metrics, checkpoints and a plot under logging.run_dir");
  command->add_option("config", args->config_path, "YAML config file");
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->add_option("--resume", args->resume,
                      "Continue the run in this directory from its last checkpoint");
  command->add_flag("--overwrite", args->overwrite,
                    "Delete the run directory's previous run (checkpoints included) first");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel train: " << status.message() << "\n";
    *exit_code = exit_code_for(status, absl::StatusCode::kFailedPrecondition);
  });
}

}  // namespace flywheel::cli
