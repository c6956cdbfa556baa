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
  absl::Mutex mu;
  std::vector<std::vector<PartResult>> results ABSL_GUARDED_BY(mu);  // [sample][part]
  int64_t remaining ABSL_GUARDED_BY(mu) = 0;                         // calls not recorded
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
  absl::Mutex mu;
  // By the worker that finished it or by the watchdog that timed it out.
  bool claimed ABSL_GUARDED_BY(mu) = false;
};

// Guarded by the pool's mu_ (the pool's map owns it).
struct ScoringPool::Worker {
  std::thread thread;
  std::shared_ptr<Call> call;  // running
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
  absl::MutexLock lock(&mu_);
  for (int64_t i = 0; i < options_.workers; ++i) start_worker();
  watchdog_ = std::thread(&ScoringPool::watch, this);
  completer_ = std::thread(&ScoringPool::complete, this);
}

ScoringPool::~ScoringPool() {
  std::map<Worker*, std::unique_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (options_.on_stopping_for_test) options_.on_stopping_for_test();
  {
    absl::MutexLock lock(&mu_);
    // Queued calls are still scored (stuck ones timed out by the watchdog), blocked submitters
    // finish, and every callback runs.
    mu_.Await(absl::Condition(this, &ScoringPool::is_idle));
    shutdown_ = true;
    workers.swap(workers_);
  }
  watchdog_.join();
  completer_.join();
  for (auto& [ptr, worker] : workers) worker->thread.join();
}

bool ScoringPool::has_work() const { return stopping_ || !queue_.empty(); }

bool ScoringPool::has_space() const {
  return stopping_ || workers_.empty() || queue_.empty() ||
         static_cast<int64_t>(queue_.size()) < options_.queue_size;
}

bool ScoringPool::has_completed() const { return shutdown_ || !completed_.empty(); }

bool ScoringPool::is_idle() const {
  return running_ == 0 && queue_.empty() && submitters_ == 0 && completed_.empty() && !completing_;
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
  std::vector<ScoredSample> empty_sums;  // nothing to call: every sample is the empty sum
  {
    absl::MutexLock lock(&batch->mu);
    batch->results.assign(n, std::vector<PartResult>(parts.size()));
    batch->remaining = static_cast<int64_t>(calls.size());
    if (calls.empty()) {
      for (size_t s = 0; s < n; ++s) empty_sums.push_back(reward_->combine(batch->results[s]));
    }
  }
  if (calls.empty()) {
    if (direct) {
      batch->done(std::move(empty_sums));
      return;
    }
    absl::MutexLock lock(&mu_);
    completed_.emplace_back(std::move(batch->done), std::move(empty_sums));
    return;
  }
  absl::MutexLock lock(&mu_);
  ++submitters_;
  for (std::shared_ptr<Call>& call : calls) {
    mu_.Await(absl::Condition(this, &ScoringPool::has_space));
    if (stopping_ || workers_.empty()) {
      const char* why =
          stopping_ ? "the scoring pool stopped" : "no scoring thread could be started";
      mu_.Unlock();
      std::vector<PartResult> results(call->sample >= 0 ? 1 : n);
      for (PartResult& r : results) r.output = absl::CancelledError(why);
      finish(call, std::move(results), false);
      mu_.Lock();
      continue;
    }
    queue_.push_back(std::move(call));
  }
  --submitters_;
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
  absl::MutexLock lock(&mu_);
  return counters_;
}

bool ScoringPool::claim(Call* call) {
  absl::MutexLock lock(&call->mu);
  if (call->claimed) return false;
  call->claimed = true;
  return true;
}

void ScoringPool::work(Worker* self) {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &ScoringPool::has_work));
    if (queue_.empty()) break;  // stopping
    std::shared_ptr<Call> call = std::move(queue_.front());
    queue_.pop_front();
    self->call = call;
    self->deadline = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(options_.timeout_s, kMaxTimeoutS)));
    const Clock::time_point deadline = self->deadline;
    ++running_;
    ++watch_epoch_;
    mu_.Unlock();
    std::vector<PartResult> results = run_call(*call->function, call->batch->samples, call->sample);
    // Lost to the watchdog: this thread was replaced and detached; it must not touch the pool.
    if (!claim(call.get())) return;
    mu_.Lock();
    self->deadline = Clock::time_point::max();  // finished: not the watchdog's any more
    mu_.Unlock();
    // A result past its deadline is a timeout, whether or not the watchdog woke up in time.
    const bool late = Clock::now() > deadline;
    if (late) results = std::vector<PartResult>(results.size());
    finish(call, std::move(results), /*timed_out=*/late);
    mu_.Lock();
    self->call.reset();
    --running_;
    ++watch_epoch_;
  }
  mu_.Unlock();
}

void ScoringPool::watch() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    Worker* expired = nullptr;
    Clock::time_point earliest = Clock::time_point::max();
    for (auto& [ptr, worker] : workers_) {
      if (worker->call && worker->deadline < earliest) {
        earliest = worker->deadline;
        expired = ptr;
      }
    }
    if (expired == nullptr || Clock::now() < earliest) {
      // Until a call starts or ends, the pool shuts down, or the earliest deadline passes.
      const int64_t seen = watch_epoch_;
      auto changed = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return shutdown_ || watch_epoch_ != seen;
      };
      if (expired == nullptr) {
        mu_.Await(absl::Condition(&changed));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::FromChrono(earliest - Clock::now()));
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
          fail_queued(absl::ResourceExhaustedError(
              absl::StrCat("no scoring thread could be started: ", e.what())));
        }
      }
    }
    mu_.Unlock();
    const size_t n = call->sample >= 0 ? 1 : call->batch->samples.size();
    finish(call, std::vector<PartResult>(n), /*timed_out=*/true);
    mu_.Lock();
    --running_;  // only now: the destructor waits until every running call is recorded
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
    absl::MutexLock lock(&mu_);
    ++counters_.calls;
    counters_.errors += errors;
    counters_.timeouts += timed_out ? 1 : 0;
  }
  std::vector<ScoredSample> out;
  {
    absl::MutexLock lock(&batch.mu);
    if (call->sample >= 0) {
      batch.results[call->sample][call->part] = std::move(results[0]);
    } else {
      for (size_t s = 0; s < results.size(); ++s) {
        batch.results[s][call->part] = std::move(results[s]);
      }
    }
    if (--batch.remaining != 0) return;
    out.reserve(batch.samples.size());
    for (const std::vector<PartResult>& r : batch.results) out.push_back(reward_->combine(r));
  }
  {
    absl::MutexLock lock(&mu_);
    counters_.samples += static_cast<int64_t>(batch.samples.size());
    if (!batch.direct) {
      completed_.emplace_back(std::move(batch.done), std::move(out));
      return;
    }
  }
  batch.done(std::move(out));
}

void ScoringPool::complete() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &ScoringPool::has_completed));
    if (completed_.empty()) return;  // shut down
    std::pair<Done, std::vector<ScoredSample>> item = std::move(completed_.front());
    completed_.pop_front();
    completing_ = true;
    mu_.Unlock();
    try {
      item.first(std::move(item.second));
    } catch (...) {  // a callback's exception is its own bug; it must not end the pool
    }
    mu_.Lock();
    completing_ = false;
  }
}

void ScoringPool::fail_queued(const absl::Status& why) {
  std::deque<std::shared_ptr<Call>> queued;
  queued.swap(queue_);
  mu_.Unlock();
  for (const std::shared_ptr<Call>& call : queued) {
    std::vector<PartResult> results(call->sample >= 0 ? 1 : call->batch->samples.size());
    for (PartResult& r : results) r.output = why;
    finish(call, std::move(results), /*timed_out=*/false);
  }
  mu_.Lock();
}

}  // namespace flywheel::rewards
