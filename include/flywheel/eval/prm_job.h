// The job of `flywheel rm --process`: a process reward model (the decoder with a value head read
// at each step's last token, from model.path with a zero head) trained with binary
// cross-entropy on step-labelled completions (trainer/step_data.h), sharded over the learner
// ranks. Held-out step accuracy, checkpoints and resume, and an export as a token classifier
// that the process_reward_model reward loads. Every rank of `world` runs one, in step.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/model_config.h"
#include "flywheel/trainer/data_checkpoints.h"
#include "flywheel/trainer/prm_trainer.h"
#include "flywheel/trainer/sft_data.h"
#include "flywheel/trainer/step_data.h"

namespace flywheel::eval {

// Held-out figures at one step (NaN: not measured).
struct PrmEvalResult {
  double step_accuracy = NAN;     // prm/accuracy on the held-out steps
  double outcome_accuracy = NAN;  // prm/outcome_accuracy
  double loss = NAN;
};

struct PrmSummary {
  int64_t steps = 0;
  std::string stopped_by;  // "" = trainer.total_steps reached
  PrmEvalResult first, last;
  std::string exported;  // the Hugging Face directory written ("" = none)
};

class PrmJob {
 public:
  // Loads the model config, tokenizer and step data (data.train_path, data.eval_path), creates
  // the trainer with the decoder of model.path and a zero head, and resumes per
  // checkpoint.resume.
  static absl::StatusOr<std::unique_ptr<PrmJob>> create(const core::Config& config,
                                                        comm::Communicator* world,
                                                        core::PluginRegistry& registry);

  // Trains until trainer.total_steps or `stop()` on any rank; evaluates, checkpoints, exports.
  absl::StatusOr<PrmSummary> run(const std::function<bool()>& stop);

 private:
  PrmJob(const core::Config& config, comm::Communicator* world) : c_(config), world_(world) {}
  absl::Status load_data();
  absl::StatusOr<PrmEvalResult> evaluate(int64_t step);
  absl::Status save(int64_t step);
  void log(const std::string& name, double value, int64_t step);

  const core::Config& c_;
  comm::Communicator* world_;
  std::optional<model::ModelConfig> model_config_;
  std::string tokenizer_dir_;
  std::optional<trainer::StepData> train_, eval_;
  trainer::OptimizerOptions optimizer_;
  std::unique_ptr<trainer::ProcessRewardTrainer> prm_;
  std::optional<trainer::DataCheckpoints> checkpoints_;
  trainer::SftCursor cursor_;
  std::unique_ptr<core::MetricsLogger> metrics_;  // rank 0 only
};

}  // namespace flywheel::eval
