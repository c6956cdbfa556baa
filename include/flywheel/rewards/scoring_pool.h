// Scores batches of samples on a pool of threads, so that scoring runs beside generation on the
// rollout worker. Every call of a function (one sample, or one batch for a batched function) has
// a deadline: past it the call scores the fallback, the timeout is counted, and a fresh thread
// takes the stuck one's place (the stuck thread is left to finish or hang on its own, touching
// nothing but its own call). Scoring therefore never stalls on a hung function. The queue is
// bounded: submit() blocks while `queue_size` calls wait for a thread. Results are handed to
// their callbacks on one completion thread, never on a scoring thread or the watchdog, so a
// callback may submit more work (and may block) without stopping scoring or timeouts.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
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

  // rewards.workers, rewards.queue_size and rewards.timeout_s.
  static ScoringPoolOptions from_config(const core::RewardsOptions& rewards) {
    return {rewards.workers, rewards.queue_size, rewards.timeout_s};
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
  void start_worker();  // requires mu_
  void work(Worker* self);
  void watch();
  void complete();  // the completion thread
  // Fails every queued call (no thread can run it); requires mu_, releases it meanwhile.
  void fail_queued(std::unique_lock<std::mutex>& lock, const absl::Status& why);
  // Who records a call's outcome: the worker that ran it or the watchdog that timed it out,
  // whichever claims it first.
  static bool claim(Call* call);
  // Records a claimed call's outcome; the last call of a batch queues it for its callback.
  void finish(const std::shared_ptr<Call>& call, std::vector<PartResult> results, bool timed_out);

  std::shared_ptr<const CompositeReward> reward_;
  ScoringPoolOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_ready_;   // a call was queued, or stopping
  std::condition_variable space_ready_;  // the queue has room
  std::condition_variable watch_wake_;   // a call started or ended, or stopping
  std::condition_variable idle_;         // something the destructor waits for ended
  std::condition_variable completed_ready_;
  std::deque<std::shared_ptr<Call>> queue_;
  std::map<Worker*, std::unique_ptr<Worker>> workers_;
  std::deque<std::pair<Done, std::vector<ScoredSample>>> completed_;  // waiting for callbacks
  ScoringCounters counters_;
  int64_t running_ = 0;      // calls on a worker
  int64_t submitters_ = 0;   // submit() calls in progress
  bool completing_ = false;  // a callback is running
  bool stopping_ = false;    // the destructor started: no new calls are queued
  bool shutdown_ = false;    // everything is done: the watchdog and completion thread exit
  std::thread watchdog_;
  std::thread completer_;
};

}  // namespace flywheel::rewards
