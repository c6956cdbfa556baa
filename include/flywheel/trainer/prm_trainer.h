// Process reward model training (`flywheel rm --process`) on the learner machinery: the sharded
// decoder with a value head ("score.weight", as the critic and the outcome reward model), AdamW,
// micro-batches packed by token budget. The head's output at each step's last token is the
// step's logit; the loss is the binary cross-entropy against the step's label, averaged over
// every rank's labelled steps, so the gradient is the same however the examples are split over
// micro-batches and ranks.
//
//   auto prm = ProcessRewardTrainer::create(options, model_config, world.get());
//   (*prm)->model().load(lookup);
//   (*prm)->step(my_step_examples);  // collective; each rank passes its share
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/optimizer_options.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"
#include "flywheel/trainer/step_data.h"

namespace flywheel::trainer {

class ProcessRewardTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<ProcessRewardTrainer>> create(
      const OptimizerOptions& options, const model::ModelConfig& config, comm::Communicator* comm);

  // One optimizer step on this rank's examples (ranks may pass different numbers, or none).
  // Metrics, over every rank's steps: prm/loss (mean binary cross-entropy), prm/accuracy (steps
  // whose probability is on the side of their label, 0.5 counting as wrong),
  // prm/outcome_accuracy (completions whose every step is judged as labelled: all correct or
  // not), prm/steps, prm/completions, prm/positive (fraction labelled correct), prm/grad_norm,
  // prm/lr, prm/skipped. Collective. InvalidArgument for an example that does not fit in
  // micro_batch_tokens; FailedPrecondition after max_consecutive_skips non-finite updates.
  absl::StatusOr<std::map<std::string, double>> step(
      const std::vector<const StepExample*>& examples);
  // The same metrics over every rank's `examples`, without training. Collective.
  absl::StatusOr<std::map<std::string, double>> evaluate(
      const std::vector<const StepExample*>& examples);

  ShardedDecoder& model() { return *model_; }
  int64_t steps() const { return counters_.steps; }
  TrainingState training_state();  // the model as "prm"
  void restore(const std::map<std::string, double>& scalars);

 private:
  ProcessRewardTrainer(const OptimizerOptions& options, comm::Communicator* comm)
      : options_(options), comm_(comm) {}
  // The passes over `examples`: sums of the metrics (loss, right, steps, outcome right,
  // completions, positive) over every rank; with `train`, the gradient of the mean loss.
  absl::StatusOr<at::Tensor> pass(const std::vector<const StepExample*>& examples, bool train);
  std::map<std::string, double> metrics(const at::Tensor& sums) const;

  OptimizerOptions options_;
  comm::Communicator* comm_;
  std::unique_ptr<ShardedDecoder> model_;
  std::unique_ptr<ShardedAdamW> optimizer_;
  std::optional<LrSchedule> schedule_;
  UpdateCounters counters_;
};

}  // namespace flywheel::trainer
