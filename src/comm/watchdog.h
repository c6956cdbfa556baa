// A deadline on blocking calls: arm() before a call, disarm() after; a call still running at its
// deadline is reported (which collective, rank, group, elapsed time, and what the group's
// progress board says of the other ranks) and the process exits with kTimeoutExitCode, which
// makes mpirun end the job. A thread owned by the watchdog waits for the deadlines, so the
// blocking call itself runs at full speed.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "progress_board.h"

namespace flywheel::comm {

class Watchdog {
 public:
  // `on_timeout(what, elapsed_s, board)` runs on the watchdog's thread and must not return;
  // `board` is the progress board's report ("" without one). `board` (may be null) records each
  // armed call, numbered, for the other ranks of the group.
  using OnTimeout = std::function<void(const std::string&, double, const std::string&)>;
  explicit Watchdog(OnTimeout on_timeout, std::unique_ptr<ProgressBoard> board = nullptr)
      : on_timeout_(std::move(on_timeout)), board_(std::move(board)), thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `collective`: every rank of the group makes the call, so it numbers the board's records; a
  // point-to-point send or receive is recorded under the last collective's number.
  void arm(const char* what, double timeout_s, bool collective = true) {
    uint64_t seq;
    {
      absl::MutexLock lock(&mu_);
      what_ = what;
      start_ = absl::Now();
      deadline_ = start_ + absl::Seconds(timeout_s);
      armed_ = true;
      ++generation_;
      if (collective) ++seq_;
      seq = seq_;
    }
    if (board_) board_->enter(seq, what);
  }
  void disarm() {
    uint64_t seq;
    std::string what;
    {
      absl::MutexLock lock(&mu_);
      armed_ = false;
      seq = seq_;
      if (board_) what = what_;
    }
    if (board_) board_->leave(seq, what.c_str());
  }

  // Armed for the scope; disarmed on the way out, exceptions included.
  class Armed {
   public:
    Armed(Watchdog& w, const char* what, double timeout_s, bool collective = true) : w_(w) {
      w_.arm(what, timeout_s, collective);
    }
    ~Armed() { w_.disarm(); }
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  void run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (!armed_) {
        mu_.Await(absl::Condition(
            +[](Watchdog* w)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return w->armed_ || w->stop_; },
            this));
        continue;
      }
      const uint64_t generation = generation_, seq = seq_;
      const absl::Time deadline = deadline_;
      auto settled = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !armed_ || generation_ != generation;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&settled), deadline)) {
        const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
        on_timeout_(what_, elapsed, bounded_report(seq));  // no return
      }
    }
  }

  // The board's report, or why there is none: the other ranks' records may sit on a network
  // filesystem that hangs too, so they are read on a thread of their own for at most 2 s (the
  // process exits right after, that thread included).
  std::string bounded_report(uint64_t seq) {
    if (!board_) return "";
    auto report = std::make_shared<std::promise<std::string>>();
    std::future<std::string> ready = report->get_future();
    std::thread([board = board_.get(), seq, report] {
      report->set_value(board->report(seq));
    }).detach();
    if (ready.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      return "the progress records could not be read within 2 s";
    }
    return ready.get();
  }

  OnTimeout on_timeout_;
  std::unique_ptr<ProgressBoard> board_;
  absl::Mutex mu_;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // every arm()
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;         // collectives: the board's numbers
  std::string what_ ABSL_GUARDED_BY(mu_);
  absl::Time start_ ABSL_GUARDED_BY(mu_), deadline_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace flywheel::comm
