// The learner step: one RL optimizer step of the sharded policy (and critic) on a batch of
// trajectory groups (DESIGN.md §1, step 5).
//
//   auto learner = Learner::create(config, model_config, world.get(), registry);
//   (*learner)->policy().load(lookup);  // or init_random(seed); the reference too when KL is on
//   absl::StatusOr<Metrics> m = (*learner)->step(groups);   // collective
//
// step() takes the same batch on every rank (the controller's sample, broadcast) and works on
// its share: within each mini-batch (mini_batches slices of whole groups) rank r takes the
// groups j with j % world == r. It then
//  1. recomputes the proximal (old) log-probs under the current policy, unless one update per
//     step makes the training forward's detached log-probs the same thing; the reference
//     log-probs when a KL term is configured; the critic's values when the estimator is gae;
//  2. computes advantages on the whole batch (every rank the same: token-level inputs are
//     all-gathered) from each trajectory's reward plus DAPO's overlong penalty when
//     overlong_buffer_len > 0, with the KL in the reward when configured (then every
//     estimator's r_i is the row sum of the KL-shaped token rewards, ALGORITHMS.md §1.2);
//  3. computes IS-correction weights (proximal vs behaviour log-probs);
//  4. runs ppo_epochs x mini_batches optimizer updates: micro-batches packed by
//     micro_batch_tokens, loss denominators all-reduced over the mini-batch first so that the
//     result does not depend on the split; the global gradient norm is clipped; an update whose
//     loss or gradient norm is not finite is skipped (counted), and max_consecutive_skips in a
//     row is an error;
//  5. version += 1.
// Metrics use verl's names where one exists (actor/pg_loss, actor/pg_clipfrac, actor/ppo_kl,
// actor/entropy, actor/grad_norm, actor/lr, critic/vf_loss, ...), averaged over the updates
// and all-reduced over ranks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/algos/algorithm.h"
#include "flywheel/algos/kl.h"
#include "flywheel/buffer/trajectory.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/trainer/lr_schedule.h"
#include "flywheel/trainer/optimizer_options.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::trainer {

using Metrics = std::map<std::string, double>;

// What step() computes before any update, over the whole batch in batch order ([S, R] or [S],
// the same on every rank).
struct AdvantageTrace {
  at::Tensor advantages;
  at::Tensor mask;
  at::Tensor scores;        // float64: each trajectory's reward after overlong shaping
  at::Tensor old_logprobs;  // the proximal log-probs: defined when the KL is in the reward
  at::Tensor ref_logprobs;  // the reference's: defined when the KL is in the reward
};

// The optimizer keys (OptimizerOptions) and the RL ones.
struct LearnerOptions : OptimizerOptions {
  int64_t ppo_epochs = 1;
  int64_t mini_batches = 1;
  double critic_lr = 1e-5;
  double temperature = 1.0;  // the rollout's: log-probs are of logits / temperature
  int64_t logprob_chunk = 1024;
  // trainer.exact_logprobs: the policy's proximal pass in the rollout engine's CPU kernels (and
  // run even with one update per step), so that on-policy tokens' proximal log-probs equal
  // their behaviour log-probs bit for bit.
  bool exact_logprobs = true;
  double kl_coef = 0;  // > 0: a reference model and a KL term (loss or reward)
  bool kl_in_reward = false;
  bool adaptive_kl = false;
  double kl_target = 0.1, kl_horizon = 10000;
  double entropy_coef = 0;
  double value_clip = 0.5;
  bool critic = false;  // a value model (the gae estimator needs one)
  // DAPO's soft overlong punishment of each score (ALGORITHMS.md §5.2): 0 = off.
  int64_t overlong_buffer_len = 0;
  // Episodes: the discount from one model turn to the next for gae / reinforce_pp
  // (environment.turn_discount); 1 = none.
  double turn_discount = 1.0;
  double overlong_penalty_factor = 1.0;
  int64_t max_response_tokens = 0;  // L_max of the punishment: rollout.max_new_tokens
  // On-policy distillation: the teacher's architecture (a frozen model sharded like the policy)
  // and the weight of -(log pi - log pi_teacher) added to each token's advantage.
  std::optional<model::ModelConfig> teacher;
  double distill_coef = 0;
  // Mixture-of-experts policies: replay the rollout engine's routes (algorithm.router_replay r3)
  // rather than only comparing the router's choices with them.
  bool router_replay = false;

  // From the config's trainer, algorithm and rollout sections.
  static LearnerOptions from_config(const core::Config& config);
};

class Learner {
 public:
  // InvalidArgument for bad options; NotFound for an unknown algorithm component. The models
  // live on `comm`'s device.
  static absl::StatusOr<std::unique_ptr<Learner>> create(const core::Config& config,
                                                         const model::ModelConfig& model_config,
                                                         comm::Communicator* comm,
                                                         core::PluginRegistry& registry);
  static absl::StatusOr<std::unique_ptr<Learner>> create(const LearnerOptions& options,
                                                         algos::Algorithm algorithm,
                                                         const model::ModelConfig& model_config,
                                                         comm::Communicator* comm);

  // One optimizer step on `groups` (identical on every rank). Collective. InvalidArgument for a
  // malformed batch (empty, a sequence longer than micro_batch_tokens, ...); FailedPrecondition
  // after max_consecutive_skips non-finite updates in a row.
  absl::StatusOr<Metrics> step(const std::vector<buffer::TrajectoryGroup>& groups);
  // Phases 1 and 2 of step() alone (no update, no version change): what the advantages of
  // `groups` would be now. Collective; errors as step().
  absl::StatusOr<AdvantageTrace> advantages(const std::vector<buffer::TrajectoryGroup>& groups);

  int64_t version() const { return version_; }
  void set_version(int64_t version) { version_ = version; }
  ShardedDecoder& policy() { return *policy_; }
  ShardedDecoder* reference() { return reference_.get(); }
  ShardedDecoder* critic() { return critic_.get(); }
  ShardedDecoder* teacher() { return teacher_.get(); }
  ShardedAdamW& optimizer() { return *optimizer_; }
  ShardedAdamW* critic_optimizer() { return critic_optimizer_.get(); }
  const LearnerOptions& options() const { return options_; }
  double kl_beta() const;
  void set_kl_beta(double beta);
  int64_t consecutive_skips() const { return consecutive_skips_; }
  void set_consecutive_skips(int64_t skips) { consecutive_skips_ = skips; }

 private:
  struct Batch;  // the step's sequences and per-token tensors
  Learner(const LearnerOptions& options, algos::Algorithm algorithm, comm::Communicator* comm);

  // Builds `batch` from `groups` and runs phases 1 and 2 (proximal / reference / critic passes,
  // shaping, advantages), adding their metrics.
  absl::Status prepare(const std::vector<buffer::TrajectoryGroup>& groups, Batch* batch,
                       Metrics* metrics);
  // Per-token outputs of `model` for this rank's sequences, without gradient: [S_local, R].
  at::Tensor infer(ShardedDecoder& model, const Batch& batch, bool values);
  // ppo_epochs x mini_batches updates of the policy (or, with `critic`, the critic).
  absl::Status update(const Batch& batch, bool critic, Metrics* metrics);

  LearnerOptions options_;
  algos::Algorithm algorithm_;
  comm::Communicator* comm_;
  std::unique_ptr<ShardedDecoder> policy_, reference_, critic_, teacher_;
  std::unique_ptr<ShardedAdamW> optimizer_, critic_optimizer_;
  std::optional<LrSchedule> schedule_, critic_schedule_;
  std::optional<algos::AdaptiveKlController> kl_controller_;
  int64_t version_ = 0;
  int64_t consecutive_skips_ = 0;
};

}  // namespace flywheel::trainer
