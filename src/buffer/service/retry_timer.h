// One thread that runs deferred work at a time: the push streams' backpressure retries, which
// must not block gRPC's callback threads while they wait for room in the buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::buffer {

class RetryTimer {
 public:
  RetryTimer() : thread_([this] { run(); }) {}
  ~RetryTimer() {  // work not yet due is dropped
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  RetryTimer(const RetryTimer&) = delete;
  RetryTimer& operator=(const RetryTimer&) = delete;

  void schedule(absl::Duration delay, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    due_.emplace(absl::Now() + delay, std::move(fn));
    ++scheduled_;
  }

 private:
  void run() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        // Sleeps until the earliest work is due, or new work or stop arrives.
        while (!stop_ && (due_.empty() || due_.begin()->first > absl::Now())) {
          seen_ = scheduled_;
          const absl::Time until = due_.empty() ? absl::InfiniteFuture() : due_.begin()->first;
          mu_.AwaitWithDeadline(absl::Condition(this, &RetryTimer::woken), until);
        }
        if (stop_) return;
        fn = std::move(due_.begin()->second);
        due_.erase(due_.begin());
      }
      fn();
    }
  }

  bool woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || scheduled_ != seen_; }

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> due_ ABSL_GUARDED_BY(mu_);
  int64_t scheduled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace flywheel::buffer
