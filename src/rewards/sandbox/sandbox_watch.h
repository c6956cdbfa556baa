// How Sandbox::run() (sandbox.cc) follows one run from the parent's side: the launcher's pipes
// read while it runs, its deadline and stdout cap enforced, its report parsed into the result.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/sandbox.h"

namespace flywheel::rewards::sandbox_internal {

using Clock = std::chrono::steady_clock;

// A file descriptor closed when destroyed (-1: none).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// What the launcher reported: the program's wait status, a setup error, the output files.
struct Report {
  bool has_status = false;
  int status = 0;
  std::string setup_error;
  std::map<std::string, std::string> files;
};

// The report records in `bytes` (cut off by the cap where it ends early).
Report parse_report(const std::string& bytes, const SandboxRequest& request);

// How a run ended, as the caller saw it.
struct RunEnd {
  int init_status = 0;  // of the launcher
  bool killed = false;  // by the caller: deadline or stdout cap
};

// Fills `result` from the launcher's report: the program's exit code or signal and its output
// files; FailedPrecondition when the sandbox itself failed (`isolation` and `program` name it).
absl::Status conclude(Report report, const RunEnd& end, const std::string& isolation,
                      const std::string& program, SandboxResult* result);

// The launcher of one run from its start (`pid`) to its end: the read ends of its pipes, their
// caps, and when it is killed.
struct WatchedRun {
  long pid = -1;
  bool namespaces = false;    // the launcher is the namespace's parent, not the init itself
  UniqueFd* pidfd = nullptr;  // -1 before Linux 5.2: waitpid is polled instead
  UniqueFd* out = nullptr;
  UniqueFd* err = nullptr;
  UniqueFd* report = nullptr;
  int64_t stdout_cap = 0, stderr_cap = 0, report_cap = 0;
  bool kill_on_stdout_overflow = false;
  Clock::time_point start, deadline;
};

// Reads stdout and stderr (into `result`, marking truncation) and the report while waiting for
// the launcher to end, killing the run at the deadline (result->timed_out) or when stdout
// overflows; reaps it, sets result->elapsed_s and takes what is left in the pipes. Internal when
// poll or waitpid fails (the run is killed and reaped first).
absl::StatusOr<RunEnd> watch(const WatchedRun& run, SandboxResult* result,
                             std::string* report_bytes);

}  // namespace flywheel::rewards::sandbox_internal
