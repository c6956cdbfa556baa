// `flywheel sft CONFIG`: supervised fine-tuning on the sharded learners (run it under mpirun for
// several ranks): masked NLL on response tokens, held-out loss and exact-match accuracy, an
// optional stop on accuracy, checkpoints and resume, and a Hugging Face export at the end.

#include <cmath>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/eval/sft_job.h"
#include "flywheel/jobs/job_setup.h"

namespace flywheel::cli {
namespace {

struct SftArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

absl::Status run(const SftArgs& args) {
  core::StopSignal stop("flywheel sft");
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config_path, args.overrides));
  const core::Config& c = job.loaded.config;
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::TrainingWorld training, jobs::join_training_world(c, "sft"));
  comm::Communicator* world = training.world.get();

  absl::StatusOr<std::unique_ptr<eval::SftJob>> sft =
      eval::SftJob::create(c, world, *job.registry, job.config_dir());
  if (!sft.ok()) return sft.status();
  absl::StatusOr<eval::SftSummary> done = (*sft)->run([&stop] { return stop.requested(); });
  if (!done.ok()) return done.status();
  if (world->rank() == 0) {
    // Episodes (environment.name) have no held-out loss: their records hold no response.
    const std::string loss =
        std::isnan(done->first.loss)
            ? ""
            : absl::StrFormat(" loss %.4f -> %.4f,", done->first.loss, done->last.loss);
    std::cout << absl::StrFormat(
        "flywheel sft: %d steps%s; held-out%s accuracy %.3f -> %.3f%s\n", done->steps,
        done->stopped_by.empty() ? "" : " (stopped by " + done->stopped_by + ")", loss,
        done->first.accuracy, done->last.accuracy,
        done->exported.empty() ? "" : "; exported to " + done->exported);
  }
  return absl::OkStatus();
}

}  // namespace

void add_sft_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SftArgs>();
  CLI::App* command = app.add_subcommand(
      "sft",
      "Supervised fine-tuning on {\"prompt\", \"response\"} or {\"messages\": [...]} records, "
      "sharded over the ranks of `mpirun -np N flywheel sft ...`");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel sft: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
