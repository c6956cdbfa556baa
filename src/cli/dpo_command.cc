// `flywheel dpo CONFIG`: preference optimisation (DPO, IPO, hinge, SimPO) on {prompt, chosen,
// rejected} pairs, sharded over the ranks of `mpirun -np N flywheel dpo ...`: the reference's
// log-probs computed once, held-out preference accuracy and greedy accuracy, checkpoints and
// resume, and a Hugging Face export at the end.
// `flywheel rm CONFIG`: a Bradley-Terry reward model on the same pairs, exported as a sequence
// classifier for the reward_model reward; `flywheel rm --process CONFIG`: a process reward model
// on step-labelled completions, exported as a token classifier for process_reward_model.

#include <cmath>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/eval/dpo_job.h"
#include "flywheel/eval/prm_job.h"
#include "flywheel/jobs/job_setup.h"

namespace flywheel::cli {
namespace {

struct DpoArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool reward_model = false;  // flywheel rm
  bool process = false;       // flywheel rm --process
};

// "a -> b" of two held-out figures, or "" when neither was measured.
std::string change(const char* what, double first, double last) {
  if (std::isnan(first) && std::isnan(last)) return "";
  return absl::StrFormat("; %s %.3f -> %.3f", what, first, last);
}

// flywheel rm --process: a process reward model.
absl::Status run_process(const core::Config& c, comm::Communicator* world,
                         core::PluginRegistry& registry, const core::StopSignal& stop) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<eval::PrmJob> prm,
                            eval::PrmJob::create(c, world, registry));
  FLYWHEEL_ASSIGN_OR_RETURN(eval::PrmSummary done, prm->run([&stop] { return stop.requested(); }));
  if (world->rank() == 0) {
    std::cout << absl::StrFormat(
        "flywheel rm --process: %d steps%s%s%s%s\n", done.steps,
        done.stopped_by.empty() ? "" : " (stopped by " + done.stopped_by + ")",
        change("held-out step accuracy", done.first.step_accuracy, done.last.step_accuracy),
        change("held-out outcome accuracy", done.first.outcome_accuracy,
               done.last.outcome_accuracy),
        done.exported.empty() ? "" : "; exported to " + done.exported);
  }
  return absl::OkStatus();
}

absl::Status run(const DpoArgs& args) {
  const char* name = args.reward_model ? "rm" : "dpo";
  core::StopSignal stop(absl::StrCat("flywheel ", name));
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config_path, args.overrides));
  const core::Config& c = job.loaded.config;
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::TrainingWorld training, jobs::join_training_world(c, name));
  comm::Communicator* world = training.world.get();
  if (args.process) return run_process(c, world, *job.registry, stop);

  absl::StatusOr<std::unique_ptr<eval::DpoJob>> dpo =
      eval::DpoJob::create(c, world, *job.registry, job.config_dir(), args.reward_model);
  if (!dpo.ok()) return dpo.status();
  absl::StatusOr<eval::DpoSummary> done = (*dpo)->run([&stop] { return stop.requested(); });
  if (!done.ok()) return done.status();
  if (world->rank() == 0) {
    const eval::DpoEvalResult &first = done->first, &last = done->last;
    std::cout << absl::StrFormat(
        "flywheel %s: %d steps%s%s%s%s%s\n", name, done->steps,
        done->stopped_by.empty() ? "" : " (stopped by " + done->stopped_by + ")",
        change(args.reward_model ? "held-out pairwise accuracy" : "held-out preference accuracy",
               first.preference_accuracy, last.preference_accuracy),
        change("reward margin", first.margin, last.margin),
        change("greedy accuracy", first.accuracy, last.accuracy),
        done->exported.empty() ? "" : "; exported to " + done->exported);
  }
  return absl::OkStatus();
}

void add_preference_command(CLI::App& app, int* exit_code, bool reward_model) {
  auto args = std::make_shared<DpoArgs>();
  args->reward_model = reward_model;
  const char* name = reward_model ? "rm" : "dpo";
  CLI::App* command = app.add_subcommand(
      name,
      reward_model
          ? "Train a Bradley-Terry reward model (a value head on the decoder) on {\"prompt\", "
            "\"chosen\", \"rejected\"} pairs, exported for the reward_model reward, or with "
            "--process a process reward model on step-labelled completions (for "
            "process_reward_model); sharded over the ranks of `mpirun -np N flywheel rm ...`"
          : "Preference optimisation (dpo.loss: sigmoid = DPO, ipo, hinge, simpo) on "
            "{\"prompt\", \"chosen\", \"rejected\"} pairs, sharded over the ranks of "
            "`mpirun -np N flywheel dpo ...`");
  command->add_option("config", args->config_path, "YAML config file")->required();
  if (reward_model) {
    command->add_flag("--process", args->process,
                      "Train a process reward model instead: a label per step of "
                      "{\"prompt\", \"completions\": [steps], \"labels\": [true|false]} records "
                      "(TRL's stepwise form), exported for the process_reward_model reward");
  }
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code, name] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel " << name << ": " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace

void add_dpo_command(CLI::App& app, int* exit_code) {
  add_preference_command(app, exit_code, /*reward_model=*/false);
}

void add_rm_command(CLI::App& app, int* exit_code) {
  add_preference_command(app, exit_code, /*reward_model=*/true);
}

}  // namespace flywheel::cli
