// Where a training step's time goes, by phase: the exclusive time of every ATen op and autograd
// node (LibTorch's RecordFunction callbacks), attributed by the flywheel scopes around them
// (RECORD_USER_SCOPE "flywheel::attention", "::norm", "::head", "::collective", "::optimizer")
// and by whether an autograd node encloses them (backward). For benchmarks: one OpProfile at a
// time per process (the callbacks are process-wide).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace flywheel::bench {

class OpProfile {
 public:
  OpProfile();  // starts recording (every thread)
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Forgets what was recorded so far and restarts the wall clock.
  void reset();

  struct Row {
    std::string phase, what;
    double seconds = 0;
  };
  // Seconds per (phase, what), in a fixed order, and a last row for the wall time spent outside
  // any op or node (MPI waits, flywheel's own loops, allocation).
  std::vector<Row> rows() const;
  // rows() as a Markdown table with each row's share of the wall time since reset().
  std::string table() const;

  // Called by the callbacks.
  void add(const std::string& phase, const std::string& what, double seconds);

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, double> seconds_;
  std::chrono::steady_clock::time_point start_;
  uint64_t handle_ = 0;
};

}  // namespace flywheel::bench
