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

namespace flywheel::cli {

// checkpoint.dir, or <logging.run_dir>/checkpoints.
std::string checkpoint_dir(const core::Config& config);

// The step directory to resume from ("" = start fresh) per checkpoint.resume, as rank 0 sees
// the filesystem. Collective.
std::string resume_path(const core::Config& config, comm::Communicator& comm);

// The tokenizer and generation files of `tokenizer_dir` by file name, for
// CheckpointSaveOptions::extra_files (export copies them next to the weights).
absl::StatusOr<std::map<std::string, std::string>> checkpoint_side_files(
    const std::string& tokenizer_dir);

// The logger of logging.sinks in logging.run_dir (call it on rank 0 only).
absl::StatusOr<std::unique_ptr<core::MetricsLogger>> make_metrics_logger(
    const core::Config& config, core::PluginRegistry& registry, int64_t total_steps,
    const std::vector<std::string>& console_metrics = {});

}  // namespace flywheel::cli
