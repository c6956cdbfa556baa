// The job of `flywheel dpo`: preference optimisation (the DPO family) of the policy on the
// sharded learners. The reference's log-probs of every pair are computed once, before training
// (from dpo.reference_path, else the initial policy; records may carry their own), so no
// reference model is held while training. Held-out preference metrics and, for held-out records
// with an answer, greedy exact-match accuracy; checkpoints, resume and a Hugging Face export at
// the end. Every rank of `world` runs one, in step.
//
// With `reward_model` it is `flywheel rm`: a Bradley-Terry reward model (the decoder with a value
// head, from model.path with a zero head) on the same pairs, no reference, held-out pairwise
// accuracy, and an export as a sequence classifier that the reward_model reward loads.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/eval/held_out_eval.h"
#include "flywheel/model/model_config.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/data_checkpoints.h"
#include "flywheel/trainer/dpo_trainer.h"
#include "flywheel/trainer/preference_data.h"
#include "flywheel/trainer/sft_data.h"

namespace flywheel::eval {

// Held-out figures at one step (NaN: not measured).
struct DpoEvalResult {
  double preference_accuracy = NAN;  // rewards/accuracies on the held-out pairs
  double margin = NAN;               // rewards/margins
  double loss = NAN;                 // dpo/loss
  double accuracy = NAN;             // greedy exact-match accuracy (policies; with answers)
};

struct DpoSummary {
  int64_t steps = 0;
  std::string stopped_by;  // "" = trainer.total_steps reached
  DpoEvalResult first, last;
  std::string exported;  // the Hugging Face directory written ("" = none)
};

class DpoJob {
 public:
  // Loads the model config, tokenizer and pairs (data.train_path, data.eval_path), creates the
  // trainer with the policy weights (model.path), computes the reference log-probs and resumes
  // per checkpoint.resume.
  static absl::StatusOr<std::unique_ptr<DpoJob>> create(const core::Config& config,
                                                        comm::Communicator* world,
                                                        core::PluginRegistry& registry,
                                                        const std::string& config_dir = "",
                                                        bool reward_model = false);

  // Trains until trainer.total_steps or `stop()` on any rank; evaluates, checkpoints, exports.
  absl::StatusOr<DpoSummary> run(const std::function<bool()>& stop);

 private:
  DpoJob(const core::Config& config, comm::Communicator* world, bool reward_model)
      : c_(config), world_(world), reward_model_(reward_model) {}
  absl::Status load_model();
  absl::Status load_data();
  absl::Status compute_reference();
  absl::Status resume();
  absl::Status save(int64_t step);
  absl::StatusOr<DpoEvalResult> evaluate(int64_t step);
  void log(const std::string& name, double value, int64_t step);

  const core::Config& c_;
  comm::Communicator* world_;
  bool reward_model_;
  int64_t batch_size_ = 1, eval_every_ = 0;  // dpo: or rm:
  std::optional<model::ModelConfig> model_config_;
  std::optional<model::TokenizerSetup> tokenizers_;
  std::optional<trainer::PreferenceData> train_, eval_pairs_;
  std::unique_ptr<trainer::DpoTrainer> dpo_;
  trainer::DpoOptions options_;
  std::optional<trainer::DataCheckpoints> checkpoints_;
  trainer::SftCursor cursor_;
  std::unique_ptr<core::MetricsLogger> metrics_;  // rank 0 only
  std::optional<HeldOutEvaluation> greedy_;       // held-out records with an answer only
};

}  // namespace flywheel::eval
