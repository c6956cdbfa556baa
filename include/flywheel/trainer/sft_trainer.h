// Supervised fine-tuning on the learner machinery: the sharded decoder, AdamW, micro-batches
// packed by token budget, and a masked NLL over the response tokens only, averaged over every
// rank's response tokens of the step (so the result does not depend on how the batch was split).
//
//   auto sft = SftTrainer::create(options, model_config, world.get());
//   (*sft)->model().load(lookup);
//   (*sft)->step(my_examples);   // collective; each rank passes its share of the step's batch
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/optimizer_options.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

// One training record: the prompt, and the response tokens the loss is taken on (with the
// eos the model should learn to emit).
struct SftExample {
  std::vector<int32_t> prompt;    // >= 1 token
  std::vector<int32_t> response;  // >= 1 token
};

using SftOptions = OptimizerOptions;

class SftTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<SftTrainer>> create(const SftOptions& options,
                                                            const model::ModelConfig& config,
                                                            comm::Communicator* comm);

  // One optimizer step on this rank's `examples` (ranks may pass different numbers, or none).
  // Metrics: sft/loss (mean NLL per response token over all ranks), sft/grad_norm, sft/lr,
  // sft/tokens (response tokens), sft/skipped. Collective. InvalidArgument for an example that
  // does not fit in micro_batch_tokens; FailedPrecondition after max_consecutive_skips
  // non-finite updates in a row.
  absl::StatusOr<std::map<std::string, double>> step(
      const std::vector<const SftExample*>& examples);
  // Mean NLL per response token over every rank's `examples`, without gradient. Collective.
  absl::StatusOr<double> eval_loss(const std::vector<const SftExample*>& examples);

  ShardedDecoder& model() { return *model_; }
  ShardedAdamW& optimizer() { return *optimizer_; }
  int64_t steps() const { return counters_.steps; }
  // For checkpoints: the model, the optimizer and the step count ("steps").
  TrainingState training_state();
  void restore(const std::map<std::string, double>& scalars);

 private:
  SftTrainer(const SftOptions& options, comm::Communicator* comm)
      : options_(options), comm_(comm) {}
  // Sum of log-probs of the response tokens and their count, over this rank's micro-batches;
  // with `train`, their gradient (of the NLL / `denominator`) is accumulated.
  absl::StatusOr<std::pair<double, double>> run(const std::vector<const SftExample*>& examples,
                                                bool train, double denominator);

  SftOptions options_;
  comm::Communicator* comm_;
  std::unique_ptr<ShardedDecoder> model_;
  std::unique_ptr<ShardedAdamW> optimizer_;
  std::optional<LrSchedule> schedule_;
  UpdateCounters counters_;
  // The step's load-balancing loss on this rank, each micro-batch's weighted by its share of
  // the step's tokens (mixtures of experts whose config asks for it).
  double aux_loss_ = 0;
};

}  // namespace flywheel::trainer
