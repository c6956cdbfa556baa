// What the rollout worker's files share: its clock, and waits on a condition variable with a
// deadline.
#pragma once

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flywheel::rollout {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits on `cv` (under `mu`, held) until `ready()` or `deadline`; returns ready().
template <typename Ready>
inline bool wait_until(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline,
                       const Ready& ready) {
  while (!ready()) {
    if (cv->WaitWithDeadline(mu, deadline)) return ready();
  }
  return true;
}

}  // namespace flywheel::rollout
