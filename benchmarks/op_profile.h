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
  // rows() as a Markdown table with each row's share of the wall time since reset(), then the
  // kTopOps ops and autograd nodes that took the longest (exclusive time) in one (phase, what).
  std::string table() const;
  static constexpr size_t kTopOps = 15;

  // Called by the callbacks: `op` is the ATen op or autograd node's name.
  void add(const std::string& phase, const std::string& what, const std::string& op,
           double seconds);

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, double> seconds_;     // (phase, what)
  std::map<std::pair<std::string, std::string>, double> op_seconds_;  // ("phase: what", op)
  std::chrono::steady_clock::time_point start_;
  uint64_t handle_ = 0;
};

}  // namespace flywheel::bench
