// Subcommands of the `flywheel` binary. Each add_*_command() registers one subcommand on `app`;
// when it runs, its exit status is stored in *exit_code.
#pragma once

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace flywheel::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the command ran and failed
constexpr int kExitUsage = 2;    // bad arguments or an invalid configuration

// kExitOk, kExitUsage for InvalidArgument and NotFound (and `usage_also`), else kExitFailure.
inline int exit_code_for(const absl::Status& s,
                         absl::StatusCode usage_also = absl::StatusCode::kInvalidArgument) {
  if (s.ok()) return kExitOk;
  return s.code() == absl::StatusCode::kInvalidArgument ||
                 s.code() == absl::StatusCode::kNotFound || s.code() == usage_also
             ? kExitUsage
             : kExitFailure;
}

void add_version_command(CLI::App& app, int* exit_code);
void add_validate_config_command(CLI::App& app, int* exit_code);
void add_config_doc_command(CLI::App& app, int* exit_code);
void add_plot_command(CLI::App& app, int* exit_code);
void add_tokenize_command(CLI::App& app, int* exit_code);
void add_score_command(CLI::App& app, int* exit_code);
void add_export_command(CLI::App& app, int* exit_code);
void add_init_model_command(CLI::App& app, int* exit_code);
void add_generate_command(CLI::App& app, int* exit_code);
void add_buffer_command(CLI::App& app, int* exit_code);
void add_sft_command(CLI::App& app, int* exit_code);
void add_dpo_command(CLI::App& app, int* exit_code);
void add_rm_command(CLI::App& app, int* exit_code);
void add_reward_command(CLI::App& app, int* exit_code);
void add_reward_serve_command(CLI::App& app, int* exit_code);
void add_learner_command(CLI::App& app, int* exit_code);
void add_rollout_command(CLI::App& app, int* exit_code);
void add_train_command(CLI::App& app, int* exit_code);
void add_make_data_command(CLI::App& app, int* exit_code);
void add_eval_command(CLI::App& app, int* exit_code);

}  // namespace flywheel::cli
