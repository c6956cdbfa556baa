#include "flywheel/trainer/learner_job.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/checkpoint.h"

namespace flywheel::trainer {

namespace fs = std::filesystem;

std::string checkpoint_dir(const core::Config& config) {
  return config.checkpoint.dir.empty() ? (fs::path(config.logging.run_dir) / "checkpoints").string()
                                       : config.checkpoint.dir;
}

std::string resume_path(const core::Config& config, comm::Communicator& comm) {
  std::string path;
  if (comm.rank() == 0) {
    switch (core::resume_from(config.checkpoint)) {
      case core::ResumeFrom::kLatest: {
        absl::StatusOr<std::string> latest = trainer::latest_checkpoint(checkpoint_dir(config));
        if (latest.ok()) path = *latest;
        break;
      }
      case core::ResumeFrom::kDirectory:
        path = config.checkpoint.resume;
        break;
      case core::ResumeFrom::kNever:
        break;
    }
  }
  return comm::broadcast_string(comm, path);
}

absl::StatusOr<std::map<std::string, std::string>> checkpoint_side_files(
    const std::string& tokenizer_dir) {
  std::map<std::string, std::string> files;
  FLYWHEEL_ASSIGN_OR_RETURN(std::vector<std::string> side_files,
                            model::hf_side_files(tokenizer_dir));
  for (const std::string& file : side_files) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::string text, core::read_file(file));
    files[fs::path(file).filename().string()] = text;
  }
  return files;
}

absl::StatusOr<std::unique_ptr<core::MetricsLogger>> make_metrics_logger(
    const core::Config& config, core::PluginRegistry& registry, int64_t total_steps,
    const std::vector<std::string>& console_metrics) {
  core::MetricsLoggerOptions options;
  options.sinks = config.logging.sinks;
  options.sink_options.run_dir = config.logging.run_dir;
  options.sink_options.total_steps = total_steps;
  options.sink_options.console_interval_s = config.logging.console_interval_s;
  options.sink_options.console_metrics = console_metrics;
  return core::MetricsLogger::create(options, registry);
}

absl::StatusOr<ResumedState> read_resumed_state(const std::string& step_dir) {
  ResumedState out;
  FLYWHEEL_ASSIGN_OR_RETURN(std::string snapshot, read_checkpoint_file(step_dir, kControllerFile));
  out.controller_snapshot = std::move(snapshot);
  // Checkpoints from before the file existed start the count again.
  absl::StatusOr<std::string> state = read_checkpoint_file(step_dir, kLearnerStateFile);
  if (state.ok()) {
    absl::StatusOr<core::Json> json = core::Json::parse(*state);
    const core::Json* v = json.ok() ? json->find("staleness_violations") : nullptr;
    if (v == nullptr || !v->is_integer()) {
      return absl::DataLossError(
          absl::StrCat(step_dir, "/", kLearnerStateFile, ": no staleness_violations"));
    }
    out.violations = v->as_int();
  }
  return out;
}

bool on_any_rank(bool here, comm::Communicator& comm) {
  at::Tensor flag = at::full({1}, here ? 1 : 0, at::kLong);
  comm.all_reduce_host(flag, comm::ReduceOp::kMax);
  return flag.item<int64_t>() != 0;
}

}  // namespace flywheel::trainer
