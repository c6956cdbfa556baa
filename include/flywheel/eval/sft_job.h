// The job of `flywheel sft`: supervised fine-tuning of the policy on the sharded learners, with
// held-out loss and exact-match accuracy, an optional stop on accuracy, checkpoints and resume,
// and a Hugging Face export at the end. Every rank of `world` runs one, in step.
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
#include "flywheel/trainer/sft_data.h"
#include "flywheel/trainer/sft_trainer.h"

namespace flywheel::eval {

// Held-out figures at one step (NaN: not measured: no eval data, or no answers).
struct SftEvalResult {
  double loss = NAN;
  double accuracy = NAN;
};

struct SftSummary {
  int64_t steps = 0;
  std::string stopped_by;  // "" = trainer.total_steps reached
  SftEvalResult first, last;
  std::string exported;  // the Hugging Face directory written ("" = none)
};

class SftJob {
 public:
  // Loads the model config, tokenizer and data (data.train_path, data.eval_path), creates the
  // trainer with the policy weights (model.path) and resumes per checkpoint.resume.
  static absl::StatusOr<std::unique_ptr<SftJob>> create(const core::Config& config,
                                                        comm::Communicator* world,
                                                        core::PluginRegistry& registry,
                                                        const std::string& config_dir = "");

  // Trains until trainer.total_steps, sft.stop_at_accuracy or `stop()` on any rank; evaluates,
  // checkpoints and exports.
  absl::StatusOr<SftSummary> run(const std::function<bool()>& stop);

 private:
  SftJob(const core::Config& config, comm::Communicator* world) : c_(config), world_(world) {}
  absl::Status load_data();
  absl::Status resume();
  absl::Status save(int64_t step);
  absl::StatusOr<SftEvalResult> evaluate(int64_t step);
  void log(const std::string& name, double value, int64_t step);

  const core::Config& c_;
  comm::Communicator* world_;
  std::optional<model::ModelConfig> model_config_;
  std::optional<model::TokenizerSetup> tokenizers_;
  std::optional<trainer::SftData> train_, eval_data_;
  std::unique_ptr<trainer::SftTrainer> sft_;
  trainer::SftOptions options_;
  std::optional<trainer::DataCheckpoints> checkpoints_;
  trainer::SftCursor cursor_;
  std::unique_ptr<core::MetricsLogger> metrics_;  // rank 0 only
  std::unique_ptr<HeldOutEvaluator> evaluator_;   // eval data with answers only
};

}  // namespace flywheel::eval
