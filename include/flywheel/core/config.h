// The whole flywheel configuration: one typed struct per top-level YAML section (DESIGN.md §4).
//
// Every field has a default, so a default-constructed Config is a complete configuration; YAML
// files and `--set` overrides only change what they name (see config_loader.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"
#include "flywheel/core/options/algorithm_options.h"
#include "flywheel/core/options/buffer_options.h"
#include "flywheel/core/options/checkpoint_options.h"
#include "flywheel/core/options/cluster_options.h"
#include "flywheel/core/options/data_options.h"
#include "flywheel/core/options/distill_options.h"
#include "flywheel/core/options/dpo_options.h"
#include "flywheel/core/options/environment_options.h"
#include "flywheel/core/options/eval_options.h"
#include "flywheel/core/options/logging_options.h"
#include "flywheel/core/options/model_options.h"
#include "flywheel/core/options/rewards_options.h"
#include "flywheel/core/options/rm_options.h"
#include "flywheel/core/options/rollout_options.h"
#include "flywheel/core/options/sft_options.h"
#include "flywheel/core/options/tokenizer_options.h"
#include "flywheel/core/options/trainer_options.h"
#include "flywheel/core/options/weight_sync_options.h"

namespace flywheel::core {

struct Config {
  ModelOptions model;
  TokenizerOptions tokenizer;
  DataOptions data;
  RolloutOptions rollout;
  AlgorithmOptions algorithm;
  RewardsOptions rewards;
  EnvironmentOptions environment;
  TrainerOptions trainer;
  SftOptions sft;
  DpoOptions dpo;
  RmOptions rm;
  DistillOptions distill;
  EvalOptions eval;
  BufferOptions buffer;
  ClusterOptions cluster;
  WeightSyncOptions weight_sync;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
  std::vector<std::string> plugins;  // shared libraries loaded before anything is built

  // Checks every field constraint and every cross-field rule; InvalidArgument lists them all,
  // one "key.path: problem" per line.
  absl::Status validate() const;
};

void bind_options(FieldBinder& b, Config& c);

// One problem found by validation, with the full key path it concerns.
struct ConfigIssue {
  std::string path;
  std::string message;
};

// All problems of `config`: field constraints (ranges, choices) and the sections' validate().
std::vector<ConfigIssue> collect_config_issues(const Config& config);

}  // namespace flywheel::core
