// The rollout worker loop (`flywheel rollout`, library flywheel_rollout_worker): acquires prompt
// leases from the controller, generates each prompt's group with the engine, scores the groups in
// the reward pool while the engine keeps generating, and pushes them (behaviour log-probs and
// per-token versions included) from a pusher thread; a fetcher thread polls its WeightSource (the
// controller over gRPC, or learner rank 0's weight channel) for newer weights, which the loop hands
// to the engine (applied between decode steps, or once drained, per rollout.weight_update) and
// acknowledges with the checksum of what the engine then holds.
//
// With an environment, each sample is a multi-turn episode run by an EpisodeRunner on the engine.
//
// With greedy_baseline, each lease also gets one greedy request (temperature 0, n 1) whose reward
// becomes the group's baseline_reward; the group is scored when both requests are done.
//
// Versions: before generating for a lease granted at version g the worker holds weights of at
// least g (the controller grants at versions whose weights are published). The controller's
// grant rule then bounds a group's staleness by max_staleness when it is trained.
//
// Preemption: a stop request (SIGTERM) ends the loop; the worker keeps generating for
// finish_on_stop_s, then aborts what is still generating and gives each lease back with its
// samples so far (PartialSample: tokens, behaviour log-probs, versions), which the
// controller re-issues with the prompt. A lease that comes with samples is continued: each
// unfinished sample is its own engine request (the prompt and its tokens prefilled, then
// decoded), and the group is assembled from the tokens it was given and the new ones. Not for
// episodes or greedy baselines, which are given back without samples and generated afresh.
//
// Controller restarts: when the controller answers with another incarnation (the learner job
// restarted from a checkpoint), the worker drops its work in flight (those leases are gone),
// forgets the weights' version (the restarted controller publishes older ones), registers
// again and goes on. Training over: once the controller says so (an AcquireWork DONE, or a
// heartbeat while busy), the worker gives its leases back, pushes what is scored, and returns
// OK, also when the controller is gone by then.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/rewards/scoring_pool.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/environment.h"
#include "flywheel/rollout/episode_runner.h"
#include "flywheel/rollout/worker/prompt_encoder.h"
#include "flywheel/rollout/worker/weight_source.h"

namespace flywheel::rollout {

struct EpisodeSummary;  // group_assembly.h

struct RolloutWorkerOptions {
  std::string worker_id;
  int64_t group_size = 8;
  int64_t max_slots = 32;         // the engine's
  SamplingParams sampling;        // stop ids and the base seed included
  double weight_timeout_s = 300;  // waiting for (or transferring) weights
  double poll_interval_s = 0.05;  // weight manifest polls
  bool verify_weights = true;     // acknowledge applied weights with their checksum
  double drain_timeout_s = 15;    // at exit: waiting for groups being scored and pushed
  // One extra greedy response per prompt, scored and sent as the group's baseline_reward (the
  // estimator needs it: remax); it is not part of the group.
  bool greedy_baseline = false;
  // With RolloutWorkerParts::environment: each sample is a multi-turn episode (episode_runner.h);
  // sampling.max_new_tokens bounds all of an episode's tokens after the prompt.
  EpisodeOptions episodes;
  // On a stop request: seconds to keep generating (groups that finish are pushed) before every
  // group still generating is handed back to the controller with its samples so far.
  double finish_on_stop_s = 0;
};

struct RolloutWorkerStats {
  int64_t groups_pushed = 0, groups_accepted = 0, groups_rejected = 0;
  int64_t leases_released = 0;
  int64_t weight_updates = 0;
  int64_t controller_restarts = 0;  // new incarnations seen
  int64_t groups_dropped = 0;       // scored for a controller that restarted since
  double weight_stage_s = 0;        // the loop's time staging updates (copies into the engine)
  int64_t generated_tokens = 0;     // tokens this worker's engine sampled for pushed groups
  // Preemption: groups handed back at a stop with their samples so far, and groups this worker
  // continued from such samples (the tokens it was given, not generated again).
  int64_t groups_handed_over = 0, handed_over_tokens = 0;
  int64_t groups_resumed = 0, resumed_tokens = 0;
};

// What a worker works with. Nothing is owned; everything must outlive run().
struct RolloutWorkerParts {
  buffer::ControllerClient* client = nullptr;
  WeightSource* weights = nullptr;  // polled by the worker's fetcher thread
  GenerationEngine* engine = nullptr;
  const PromptEncoder* encoder = nullptr;
  const model::Tokenizer* tokenizer = nullptr;  // decodes the completions rewards see
  rewards::ScoringPool* pool = nullptr;
  // Set: every sample is an episode with this environment. Its trajectory is the whole stream
  // (loss mask 0 and the previous model token's version on the environment's tokens), and its
  // reward is the rewards' score of the whole conversation plus the environment's turn rewards.
  // Not with greedy_baseline.
  std::shared_ptr<const Environment> environment;
  // Set (instead of an environment): every sample is an episode of this driver (the agents of
  // rollout.agent, agent/agent_runner.h), the engine's only user. Its running episodes count
  // as the slots they may use. Not owned.
  EpisodeDriver* agents = nullptr;
};

// Asked between steps of the loop (and while waiting for weights): true ends run() with OK.
using StopRequested = std::function<bool()>;

class RolloutWorker {
 public:
  RolloutWorker(const RolloutWorkerOptions& options, const RolloutWorkerParts& parts);
  ~RolloutWorker();

  // Until the controller says every prompt is done (OK), a stop request (OK), or an error
  // (the controller unreachable, weights that never arrive or do not apply).
  absl::Status run(const StopRequested& stop);
  RolloutWorkerStats stats() const;

 private:
  struct Pending;  // a lease waiting for the engine
  struct Active;   // a lease the engine works on, by request id

  absl::Status loop();
  // After a controller restart: every request and group in flight dropped, the weights'
  // version forgotten.
  absl::Status reset_for_restart();
  // Aborts generation and gives every lease back (the prompts are re-issued).
  void give_back_leases();
  // After a stop request: generates for finish_on_stop_s, then gives every lease back, each
  // group still generating with its samples so far (when it can be continued elsewhere).
  void hand_over_leases();
  // Submits a lease that came with samples to continue: one request per unfinished sample.
  absl::Status submit_resumed(Pending& next);
  // A resumed group's request finished (or was aborted): its sample joins the group.
  void collect_resumed(GroupResult finished, const std::string& key, int64_t sample);
  absl::Status acquire(bool* done);
  absl::Status submit_ready();
  // Hands the newest fetched weights to the engine. When it holds less than `min_version`,
  // waits for them (up to weight_timeout_s, DeadlineExceeded); Aborted "controller restarted"
  // when a heartbeat finds another incarnation meanwhile; OK without them when a heartbeat says
  // training is over or the worker is stopping (the caller checks applied_version_).
  absl::Status apply_weights(int64_t min_version);
  void maybe_acknowledge();
  void collect_finished();
  // Scores a finished group and queues it for the pusher (or gives its lease back when a sample
  // failed). `episodes`: each sample's episode (its environment rewards are added to its score).
  void score_group(std::unique_ptr<Active> active, std::vector<EpisodeSummary> episodes);
  // The engine's work, or the episode runner's when there is one.
  bool generating() const;
  void step_generation();
  void abort_generation();
  void fetch_loop();
  void push_loop();

  RolloutWorkerOptions options_;
  buffer::ControllerClient* client_;
  WeightSource* weights_;
  GenerationEngine* engine_;
  const PromptEncoder* encoder_;
  const model::Tokenizer* tokenizer_;
  rewards::ScoringPool* pool_;
  std::unique_ptr<EpisodeRunner> own_runner_;  // with an environment
  EpisodeDriver* runner_ = nullptr;            // own_runner_ or parts.agents
  bool agents_ = false;

  std::deque<std::unique_ptr<Pending>> pending_;
  std::map<std::string, std::unique_ptr<Active>> active_;
  int64_t acked_version_ = -1;
  std::vector<core::WeightTensor> applied_manifest_;
  int64_t applied_version_ = -1;  // staged into the engine
  StopRequested stop_;
  // High 32 bits of the current controller's lease ids (its incarnation); groups of other
  // leases are not pushed. kNoLeases while registering again.
  static constexpr uint64_t kNoLeases = ~uint64_t{0};
  std::atomic<uint64_t> lease_tag_{kNoLeases};

  // Fetcher thread. Waits on the condition variables also end on stopping_ (set under both
  // mutexes) and on the stop request (asked at each fetch round).
  mutable absl::Mutex fetch_mu_;
  absl::CondVar fetch_cv_;  // a fetch round ended, or stopping
  std::shared_ptr<core::PublishedWeights> fetched_ ABSL_GUARDED_BY(fetch_mu_);  // newest, untaken
  // Applied; its memory is reused.
  std::shared_ptr<core::PublishedWeights> spare_ ABSL_GUARDED_BY(fetch_mu_);
  int64_t fetched_version_ ABSL_GUARDED_BY(fetch_mu_) = -1;
  // The fetcher forgets the version it knows (restart).
  bool forget_fetched_ ABSL_GUARDED_BY(fetch_mu_) = false;
  absl::Status fetch_error_ ABSL_GUARDED_BY(fetch_mu_);
  std::thread fetcher_;

  // Pusher thread.
  mutable absl::Mutex push_mu_;
  absl::CondVar push_cv_;  // to_push_ or pushing_ changed, or stopping
  std::deque<buffer::TrajectoryGroup> to_push_ ABSL_GUARDED_BY(push_mu_);
  // Groups taken by the pusher, not yet acknowledged.
  int64_t pushing_ ABSL_GUARDED_BY(push_mu_) = 0;
  int64_t env_errors_unreported_ ABSL_GUARDED_BY(push_mu_) = 0;  // episodes, since the last group
  absl::Status push_error_ ABSL_GUARDED_BY(push_mu_);
  std::thread pusher_;

  std::atomic<bool> weights_finished_{false};  // the fetcher's weights_->finished()
  std::atomic<int64_t> scoring_{0};            // groups in the scoring pool
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex stats_mu_;
  RolloutWorkerStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace flywheel::rollout
