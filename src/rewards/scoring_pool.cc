#include "flywheel/rewards/scoring_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>

#include "absl/strings/str_cat.h"

namespace flywheel::rewards {

using Clock = std::chrono::steady_clock;

// Longer deadlines would overflow the clock's nanoseconds: 1e7 s is "no deadline" in practice.
constexpr double kMaxTimeoutS = 1e7;

RewardInput OwnedSample::view() const {
  RewardInput in;
  in.record = record.get();
  in.record_name = record_name;
  in.prompt = prompt;
  in.completion = completion;
  in.completion_ids = completion_ids;
  in.truncated = truncated;
  return in;
}

struct ScoringPool::Batch {
  std::vector<OwnedSample> samples;
  std::mutex mu;
  std::vector<std::vector<PartResult>> results;  // [sample][part], guarded by mu
  int64_t remaining = 0;                         // calls not recorded, guarded by mu
  Done done;
  // `done` only fulfils a promise (score()): called where the batch completes, so that score()
  // works from inside a callback running on the completion thread.
  bool direct = false;
};

// One function on one sample, or on every sample of a batch (sample == -1).
struct ScoringPool::Call {
  std::shared_ptr<Batch> batch;
  size_t part = 0;
  int64_t sample = -1;
  std::shared_ptr<const RewardFunction> function;
  std::mutex mu;
  bool claimed = false;  // by the worker that finished it or by the watchdog that timed it out
};

struct ScoringPool::Worker {
  std::thread thread;
  std::shared_ptr<Call> call;  // running; guarded by the pool's mu_
  Clock::time_point deadline;  // of `call`; max() once the worker finished it
};

namespace {

// Runs the call's function, turning exceptions into errors.
std::vector<PartResult> run_call(const RewardFunction& function,
                                 const std::vector<OwnedSample>& samples, int64_t sample) {
  std::vector<PartResult> out;
  try {
    if (sample >= 0) {
      out.resize(1);
      out[0].output = function.score(samples[sample].view());
      return out;
    }
    std::vector<RewardInput> inputs;
    inputs.reserve(samples.size());
    for (const OwnedSample& s : samples) inputs.push_back(s.view());
    std::vector<absl::StatusOr<RewardOutput>> outputs = function.score_batch(inputs);
    out.resize(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      out[i].output =
          i < outputs.size()
              ? std::move(outputs[i])
              : absl::InternalError(absl::StrCat("score_batch returned ", outputs.size(),
                                                 " results for ", samples.size(), " samples"));
    }
  } catch (const std::exception& e) {
    out.assign(sample >= 0 ? 1 : samples.size(), PartResult{});
    for (PartResult& r : out) r.output = absl::InternalError(absl::StrCat("threw: ", e.what()));
  } catch (...) {
    out.assign(sample >= 0 ? 1 : samples.size(), PartResult{});
    for (PartResult& r : out) r.output = absl::InternalError("threw a non-standard exception");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ScoringPool>> ScoringPool::create(
    std::shared_ptr<const CompositeReward> reward, const ScoringPoolOptions& options) {
  if (!reward) return absl::InvalidArgumentError("scoring pool: no reward");
  if (options.workers < 1 || options.queue_size < 1 || !(options.timeout_s > 0)) {
    return absl::InvalidArgumentError(
        "scoring pool: workers and queue_size must be >= 1 and timeout_s > 0");
  }
  return std::unique_ptr<ScoringPool>(new ScoringPool(std::move(reward), options));
}

ScoringPool::ScoringPool(std::shared_ptr<const CompositeReward> reward,
                         const ScoringPoolOptions& options)
    : reward_(std::move(reward)), options_(options) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t i = 0; i < options_.workers; ++i) start_worker();
  watchdog_ = std::thread(&ScoringPool::watch, this);
  completer_ = std::thread(&ScoringPool::complete, this);
}

ScoringPool::~ScoringPool() {
  std::map<Worker*, std::unique_ptr<Worker>> workers;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    work_ready_.notify_all();
    space_ready_.notify_all();
    watch_wake_.notify_all();
    // Queued calls are still scored (stuck ones timed out by the watchdog), blocked submitters
    // finish, and every callback runs.
    idle_.wait(lock, [&] {
      return running_ == 0 && queue_.empty() && submitters_ == 0 && completed_.empty() &&
             !completing_;
    });
    shutdown_ = true;
    workers.swap(workers_);
  }
  work_ready_.notify_all();
  watch_wake_.notify_all();
  completed_ready_.notify_all();
  watchdog_.join();
  completer_.join();
  for (auto& [ptr, worker] : workers) worker->thread.join();
}

void ScoringPool::start_worker() {
  auto worker = std::make_unique<Worker>();
  Worker* raw = worker.get();
  workers_[raw] = std::move(worker);
  raw->thread = std::thread(&ScoringPool::work, this, raw);
}

void ScoringPool::submit(std::vector<OwnedSample> samples, Done done) {
  enqueue(std::move(samples), std::move(done), /*direct=*/false);
}

void ScoringPool::enqueue(std::vector<OwnedSample> samples, Done done, bool direct) {
  auto batch = std::make_shared<Batch>();
  batch->direct = direct;
  batch->samples = std::move(samples);
  const size_t n = batch->samples.size();
  const std::vector<WeightedReward>& parts = reward_->parts();
  batch->results.assign(n, std::vector<PartResult>(parts.size()));
  batch->done = std::move(done);
  std::vector<std::shared_ptr<Call>> calls;
  for (size_t p = 0; p < parts.size() && n > 0; ++p) {
    const int64_t per_call = parts[p].function->batched() ? -1 : 0;
    for (int64_t s = 0; s < (per_call < 0 ? 1 : static_cast<int64_t>(n)); ++s) {
      auto call = std::make_shared<Call>();
      call->batch = batch;
      call->part = p;
      call->sample = per_call < 0 ? -1 : s;
      call->function = parts[p].function;
      calls.push_back(std::move(call));
    }
  }
  batch->remaining = static_cast<int64_t>(calls.size());
  if (calls.empty()) {  // nothing to call: every sample is the empty sum
    std::vector<ScoredSample> out;
    for (size_t s = 0; s < n; ++s) out.push_back(reward_->combine(batch->results[s]));
    if (direct) {
      batch->done(std::move(out));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    completed_.emplace_back(std::move(batch->done), std::move(out));
    completed_ready_.notify_one();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  ++submitters_;
  for (std::shared_ptr<Call>& call : calls) {
    space_ready_.wait(lock, [&] {
      return stopping_ || workers_.empty() || queue_.empty() ||
             static_cast<int64_t>(queue_.size()) < options_.queue_size;
    });
    if (stopping_ || workers_.empty()) {
      const char* why =
          stopping_ ? "the scoring pool stopped" : "no scoring thread could be started";
      lock.unlock();
      std::vector<PartResult> results(call->sample >= 0 ? 1 : n);
      for (PartResult& r : results) r.output = absl::CancelledError(why);
      finish(call, std::move(results), false);
      lock.lock();
      continue;
    }
    queue_.push_back(std::move(call));
    work_ready_.notify_one();
  }
  --submitters_;
  idle_.notify_all();
}

std::vector<ScoredSample> ScoringPool::score(std::vector<OwnedSample> samples) {
  std::promise<std::vector<ScoredSample>> promise;
  std::future<std::vector<ScoredSample>> future = promise.get_future();
  enqueue(
      std::move(samples),
      [&promise](std::vector<ScoredSample> out) { promise.set_value(std::move(out)); },
      /*direct=*/true);
  return future.get();
}

ScoringCounters ScoringPool::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

bool ScoringPool::claim(Call* call) {
  std::lock_guard<std::mutex> lock(call->mu);
  if (call->claimed) return false;
  call->claimed = true;
  return true;
}

void ScoringPool::work(Worker* self) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    std::shared_ptr<Call> call = std::move(queue_.front());
    queue_.pop_front();
    space_ready_.notify_one();
    if (queue_.empty()) idle_.notify_all();  // the destructor waits for an empty queue
    self->call = call;
    self->deadline = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(options_.timeout_s, kMaxTimeoutS)));
    ++running_;
    watch_wake_.notify_all();
    lock.unlock();
    std::vector<PartResult> results = run_call(*call->function, call->batch->samples, call->sample);
    // Lost to the watchdog: this thread was replaced and detached; it must not touch the pool.
    if (!claim(call.get())) return;
    lock.lock();
    self->deadline = Clock::time_point::max();  // finished: not the watchdog's any more
    lock.unlock();
    finish(call, std::move(results), /*timed_out=*/false);
    lock.lock();
    self->call.reset();
    --running_;
    watch_wake_.notify_all();
    idle_.notify_all();
  }
}

void ScoringPool::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (shutdown_) return;
    Worker* expired = nullptr;
    Clock::time_point earliest = Clock::time_point::max();
    for (auto& [ptr, worker] : workers_) {
      if (worker->call && worker->deadline < earliest) {
        earliest = worker->deadline;
        expired = ptr;
      }
    }
    if (expired == nullptr || Clock::now() < earliest) {
      if (expired == nullptr) {
        watch_wake_.wait(lock);
      } else {
        watch_wake_.wait_until(lock, earliest);
      }
      continue;
    }
    std::shared_ptr<Call> call = expired->call;
    if (!claim(call.get())) {  // the worker finished it just now and will clear it
      expired->deadline = Clock::time_point::max();
      continue;
    }
    // Replace the stuck thread; it keeps only its call (shared), never the pool.
    expired->thread.detach();
    workers_.erase(expired);
    ++counters_.abandoned_threads;
    if (!stopping_ || !queue_.empty()) {
      try {
        start_worker();
      } catch (const std::exception& e) {  // e.g. out of threads after many abandoned ones
        ++counters_.thread_start_failures;
        if (workers_.empty()) {
          fail_queued(lock, absl::ResourceExhaustedError(
                                absl::StrCat("no scoring thread could be started: ", e.what())));
        }
      }
    }
    lock.unlock();
    const size_t n = call->sample >= 0 ? 1 : call->batch->samples.size();
    finish(call, std::vector<PartResult>(n), /*timed_out=*/true);
    lock.lock();
    --running_;  // only now: the destructor waits until every running call is recorded
    idle_.notify_all();
  }
}

void ScoringPool::finish(const std::shared_ptr<Call>& call, std::vector<PartResult> results,
                         bool timed_out) {
  Batch& batch = *call->batch;
  int64_t errors = 0;
  for (PartResult& r : results) {
    r.timed_out = timed_out;
    if (!timed_out && !r.output.ok()) ++errors;
  }
  {  // counted before the batch can complete, so a caller woken by `done` sees every call
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.calls;
    counters_.errors += errors;
    counters_.timeouts += timed_out ? 1 : 0;
  }
  bool complete = false;
  {
    std::lock_guard<std::mutex> lock(batch.mu);
    if (call->sample >= 0) {
      batch.results[call->sample][call->part] = std::move(results[0]);
    } else {
      for (size_t s = 0; s < results.size(); ++s) {
        batch.results[s][call->part] = std::move(results[s]);
      }
    }
    complete = --batch.remaining == 0;
  }
  if (!complete) return;
  std::vector<ScoredSample> out;
  out.reserve(batch.samples.size());
  for (const std::vector<PartResult>& r : batch.results) out.push_back(reward_->combine(r));
  std::unique_lock<std::mutex> lock(mu_);
  counters_.samples += static_cast<int64_t>(batch.samples.size());
  if (batch.direct) {
    lock.unlock();
    batch.done(std::move(out));
    return;
  }
  completed_.emplace_back(std::move(batch.done), std::move(out));
  completed_ready_.notify_one();
}

void ScoringPool::complete() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    completed_ready_.wait(lock, [&] { return shutdown_ || !completed_.empty(); });
    if (completed_.empty()) return;  // shut down
    std::pair<Done, std::vector<ScoredSample>> item = std::move(completed_.front());
    completed_.pop_front();
    completing_ = true;
    lock.unlock();
    try {
      item.first(std::move(item.second));
    } catch (...) {  // a callback's exception is its own bug; it must not end the pool
    }
    lock.lock();
    completing_ = false;
    idle_.notify_all();
  }
}

void ScoringPool::fail_queued(std::unique_lock<std::mutex>& lock, const absl::Status& why) {
  std::deque<std::shared_ptr<Call>> queued;
  queued.swap(queue_);
  space_ready_.notify_all();
  lock.unlock();
  for (const std::shared_ptr<Call>& call : queued) {
    std::vector<PartResult> results(call->sample >= 0 ? 1 : call->batch->samples.size());
    for (PartResult& r : results) r.output = why;
    finish(call, std::move(results), /*timed_out=*/false);
  }
  lock.lock();
}

}  // namespace flywheel::rewards
