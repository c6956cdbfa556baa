// Graceful stops for long jobs (sft, learner, rollout). SIGINT / SIGTERM are taken by a thread
// (sigwait) rather than a handler: the job checks requested() at step boundaries, then
// checkpoints and stops; a second signal exits at once. Construct it first in main's thread,
// before any other thread starts, so that every thread inherits the blocked signals.
//
// Under `flywheel train` the launcher's pid is in FLYWHEEL_LAUNCHER_PID: when that process is
// gone the job exits at once (children never outlive the launcher, even under mpirun), and a
// file named FLYWHEEL_STOP_FILE, when it appears, asks for a graceful stop like a signal.
#pragma once

#include <signal.h>

#include <atomic>
#include <string>
#include <thread>

namespace flywheel::core {

class StopSignal {
 public:
  // `who` prefixes the messages ("flywheel sft").
  explicit StopSignal(std::string who);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // A signal arrived or the stop file exists.
  bool requested() const;

 private:
  std::string who_;
  sigset_t set_;
  std::atomic<bool> stop_{false}, done_{false};
  std::string stop_file_;
  std::thread thread_;
  std::thread watch_;  // the launcher's liveness
};

}  // namespace flywheel::core
