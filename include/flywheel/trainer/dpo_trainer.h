// Preference optimisation (the DPO family, algos/preference_loss.h) on the learner machinery:
// the sharded decoder, AdamW, micro-batches packed by token budget. The loss of a pair is a
// non-linear function of two sums over tokens that may fall into different micro-batches, so a
// step makes two passes: one without gradient for every response's summed log-prob, from
// which the loss and its derivative by each sum follow exactly; then one with gradient of
// sum_i (dL/dlogp_i) logp_i. The result equals the one-pass gradient of the mean loss over every
// rank's pairs, however the pairs are split over micro-batches and ranks.
//
//   auto dpo = DpoTrainer::create(options, model_config, world.get());
//   (*dpo)->model().load(lookup);
//   (*dpo)->set_reference(my_pairs);  // the initial weights are the reference: log-probs kept
//   (*dpo)->step(my_step_pairs);      // collective; each rank passes its share
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/algos/preference_loss.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/optimizer_options.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

// One preference pair: a prompt and two responses (each ends with the eos the model should
// emit), and the reference's summed log-prob of each (NaN until set_reference()).
struct PreferenceExample {
  std::vector<int32_t> prompt;    // >= 1 token
  std::vector<int32_t> chosen;    // >= 1 token
  std::vector<int32_t> rejected;  // >= 1 token
  double ref_chosen = NAN, ref_rejected = NAN;
  double margin = 0;  // bradley_terry: the reward the chosen response should lead by
};

struct DpoOptions {
  OptimizerOptions optimizer;
  algos::PreferenceLossOptions loss;
  // A reward model (loss bradley_terry): the decoder with a value head ("score.weight"), each
  // response's scalar the head's output at its last token, as reward_model scores it.
  bool reward_model = false;
};

class DpoTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<DpoTrainer>> create(const DpoOptions& options,
                                                            const model::ModelConfig& config,
                                                            comm::Communicator* comm);

  // Stores the current weights' summed log-probs of each pair's responses as its reference.
  // Call with the initial weights (model.path), before training and before loading a
  // checkpoint. Collective.
  absl::Status set_reference(const std::vector<PreferenceExample*>& examples);

  // One optimizer step on this rank's pairs (ranks may pass different numbers, or none).
  // Metrics with TRL's names, means over every rank's pairs: rewards/chosen, rewards/rejected,
  // rewards/margins, rewards/accuracies (chosen reward above rejected; rewards within 1e-4 * beta
  // of each other count as half), logps/chosen, logps/rejected; and dpo/loss,
  // dpo/grad_norm, dpo/lr, dpo/pairs, dpo/skipped (a reward model: rm/..., and no logps/).
  // Collective. InvalidArgument for a pair without its reference (unless the loss is
  // reference-free) or that does not fit in micro_batch_tokens; FailedPrecondition after
  // max_consecutive_skips non-finite updates.
  absl::StatusOr<std::map<std::string, double>> step(
      const std::vector<const PreferenceExample*>& examples);
  // The same metrics (and dpo/loss) over every rank's `examples`, without training. Collective.
  absl::StatusOr<std::map<std::string, double>> evaluate(
      const std::vector<const PreferenceExample*>& examples);

  // "dpo/", or "rm/" for a reward model: dpo/loss or rm/loss, ...
  const std::string& metric_prefix() const { return prefix_; }
  ShardedDecoder& model() { return *model_; }
  ShardedAdamW& optimizer() { return *optimizer_; }
  int64_t steps() const { return counters_.steps; }
  TrainingState training_state();
  void restore(const std::map<std::string, double>& scalars);

 private:
  DpoTrainer(const DpoOptions& options, comm::Communicator* comm)
      : options_(options), comm_(comm), prefix_(options.reward_model ? "rm/" : "dpo/") {}
  // Summed log-prob of each response (a reward model: its reward): [2 x pairs] float64, chosen of
  // pair i at 2i, rejected at 2i + 1. With `weights` ([2 x pairs]), the gradient of
  // sum_i weights_i logp_i is accumulated.
  absl::StatusOr<at::Tensor> response_logps(const std::vector<const PreferenceExample*>& examples,
                                            const at::Tensor* weights);
  // The loss of `examples` from their summed log-probs, with the derivative of the mean loss
  // over every rank's pairs by each sum in `*gradient` (when not null). Collective (the count).
  absl::StatusOr<algos::PreferenceLossResult> loss(
      const std::vector<const PreferenceExample*>& examples, const at::Tensor& logps,
      double* loss_mean_part, at::Tensor* gradient);
  std::map<std::string, double> metrics(const algos::PreferenceLossResult& result,
                                        const at::Tensor& logps, double loss);

  DpoOptions options_;
  comm::Communicator* comm_;
  std::string prefix_;  // of the loss and optimizer metrics: "dpo/", a reward model's "rm/"
  std::unique_ptr<ShardedDecoder> model_;
  std::unique_ptr<ShardedAdamW> optimizer_;
  std::optional<LrSchedule> schedule_;
  UpdateCounters counters_;
};

}  // namespace flywheel::trainer
