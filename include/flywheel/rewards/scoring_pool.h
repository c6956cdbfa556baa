// Scores batches of samples on a pool of threads, so that scoring runs beside generation on the
// rollout worker. Every call of a function (one sample, or one batch for a batched function) has
// a deadline: past it the call scores the fallback, the timeout is counted, and a fresh thread
// takes the stuck one's place (the stuck thread is left to finish or hang on its own, touching
// nothing but its own call). Scoring therefore never stalls on a hung function. The queue is
// bounded: submit() blocks while `queue_size` calls wait for a thread. Results are handed to
// their callbacks on one completion thread, never on a scoring thread or the watchdog, so a
// callback may submit more work (and may block) without stopping scoring or timeouts.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/options/rewards_options.h"
#include "flywheel/rewards/composite_reward.h"

namespace flywheel::rewards {

// A sample that owns what its RewardInput points to.
struct OwnedSample {
  std::shared_ptr<const core::Json> record;  // an object; never null
  std::string record_name;
  std::string prompt;
  std::string completion;
  std::vector<int32_t> completion_ids;
  bool truncated = false;

  RewardInput view() const;
};

struct ScoringPoolOptions {
  int64_t workers = 2;
  int64_t queue_size = 4096;  // calls
  double timeout_s = 10.0;    // per call; values over 1e7 s (115 days) mean 1e7 s
  // Tests: called by the destructor once it refuses new calls, before it waits for the rest.
  std::function<void()> on_stopping_for_test;

  // rewards.workers, rewards.queue_size and rewards.timeout_s.
  static ScoringPoolOptions from_config(const core::RewardsOptions& rewards) {
    return {rewards.workers, rewards.queue_size, rewards.timeout_s, nullptr};
  }
};

struct ScoringCounters {
  int64_t samples = 0;                // samples scored (whatever the outcome)
  int64_t calls = 0;                  // function calls finished or timed out
  int64_t errors = 0;                 // calls that returned an error
  int64_t timeouts = 0;               // calls past their deadline
  int64_t abandoned_threads = 0;      // threads left running a timed-out call
  int64_t thread_start_failures = 0;  // replacements the system refused to start
};

class ScoringPool {
 public:
  using Done = std::function<void(std::vector<ScoredSample>)>;

  static absl::StatusOr<std::unique_ptr<ScoringPool>> create(
      std::shared_ptr<const CompositeReward> reward, const ScoringPoolOptions& options);
  // Scores what was submitted (each call finishes or times out), runs every callback, then stops
  // the threads. Submissions made while it waits (by a callback, or by a submitter that was
  // blocked) get a "the scoring pool stopped" error for each call instead.
  ~ScoringPool();
  ScoringPool(const ScoringPool&) = delete;
  ScoringPool& operator=(const ScoringPool&) = delete;

  // Queues `samples`; `done` gets one result per sample, in order, on the completion thread, once
  // every call finished or timed out. Blocks while the queue is full.
  void submit(std::vector<OwnedSample> samples, Done done);
  // Scores and waits (without the completion thread, so a callback may call it too).
  std::vector<ScoredSample> score(std::vector<OwnedSample> samples);

  ScoringCounters counters() const;

 private:
  struct Batch;
  struct Call;
  struct Worker;

  ScoringPool(std::shared_ptr<const CompositeReward> reward, const ScoringPoolOptions& options);
  void enqueue(std::vector<OwnedSample> samples, Done done, bool direct);
  void start_worker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void work(Worker* self);
  void watch();
  void complete();  // the completion thread
  // Fails every queued call (no thread can run it); releases mu_ meanwhile.
  void fail_queued(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Who records a call's outcome: the worker that ran it or the watchdog that timed it out,
  // whichever claims it first.
  static bool claim(Call* call);
  // Records a claimed call's outcome; the last call of a batch queues it for its callback.
  void finish(const std::shared_ptr<Call>& call, std::vector<PartResult> results, bool timed_out)
      ABSL_LOCKS_EXCLUDED(mu_);

  // What the threads wait for (absl::Condition re-evaluates them whenever mu_ is released).
  bool has_work() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);       // a call queued, or stopping
  bool has_space() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);      // the queue has room
  bool has_completed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // a callback to run, or shut down
  bool is_idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);        // all the destructor waits for

  std::shared_ptr<const CompositeReward> reward_;
  ScoringPoolOptions options_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Call>> queue_ ABSL_GUARDED_BY(mu_);
  std::map<Worker*, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // Waiting for their callbacks.
  std::deque<std::pair<Done, std::vector<ScoredSample>>> completed_ ABSL_GUARDED_BY(mu_);
  ScoringCounters counters_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;      // calls on a worker
  int64_t submitters_ ABSL_GUARDED_BY(mu_) = 0;   // submit() calls in progress
  int64_t watch_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when a call starts or ends: the watchdog
  bool completing_ ABSL_GUARDED_BY(mu_) = false;  // a callback is running
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;    // the destructor started: no new calls queued
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;    // all done: the watchdog and completer exit
  std::thread watchdog_;
  std::thread completer_;
};

}  // namespace flywheel::rewards
