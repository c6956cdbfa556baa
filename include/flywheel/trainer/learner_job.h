// Pieces every learner job (`flywheel sft`, `flywheel learner`) shares: where checkpoints live,
// which one to resume from (rank 0 decides, every rank follows), the files a checkpoint carries
// for export, and the metrics logger of rank 0.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"

namespace flywheel::trainer {

// checkpoint.dir, or <logging.run_dir>/checkpoints.
std::string checkpoint_dir(const core::Config& config);

// The step directory to resume from ("" = start fresh) per checkpoint.resume, as rank 0 sees
// the filesystem. Collective.
std::string resume_path(const core::Config& config, comm::Communicator& comm);

// The tokenizer and generation files of `tokenizer_dir` by file name, for
// CheckpointSaveOptions::extra_files (export copies them next to the weights).
absl::StatusOr<std::map<std::string, std::string>> checkpoint_side_files(
    const std::string& tokenizer_dir);

// Whether `here` holds on any rank of `comm` (a stop signal one rank got: every rank stops
// together). Collective.
bool on_any_rank(bool here, comm::Communicator& comm);

// The logger of logging.sinks in logging.run_dir (call it on rank 0 only).
absl::StatusOr<std::unique_ptr<core::MetricsLogger>> make_metrics_logger(
    const core::Config& config, core::PluginRegistry& registry, int64_t total_steps,
    const std::vector<std::string>& console_metrics = {});

// What a resumed run carries over besides the learners' state (rank 0 reads it).
struct ResumedState {
  std::string controller_snapshot;
  int64_t violations = 0;  // trajectories trained beyond max_staleness before the resume
};

// The controller snapshot (controller.json) and the learner state (learner_state.json) of an RL
// checkpoint's step directory. DataLoss for a learner state without its count.
absl::StatusOr<ResumedState> read_resumed_state(const std::string& step_dir);

// The names of those files in a step directory.
inline constexpr char kControllerFile[] = "controller.json";
inline constexpr char kLearnerStateFile[] = "learner_state.json";

}  // namespace flywheel::trainer
