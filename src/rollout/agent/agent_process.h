// One run of the agent command: started with fork + exec in its own process group (killed with
// it, and by the kernel when the worker dies), the prompt record on stdin (a memfd: any size,
// never a blocked writer), stdout and stderr read by a thread of its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::rollout::agent {

struct AgentProcessOptions {
  std::vector<std::string> command;        // command[0]: a path or a name on PATH
  std::string working_dir;                 // "" = the worker's
  std::map<std::string, std::string> env;  // added to (or replacing in) the worker's
  std::string stdin_data;
  int64_t max_line_bytes = int64_t{1} << 20;  // longer stdout lines are not read for a reward
  int64_t stderr_tail_bytes = 4096;           // kept for the error message of a failed run
};

class AgentProcess {
 public:
  // Unavailable when the command cannot be started (not found, fork fails).
  static absl::StatusOr<std::unique_ptr<AgentProcess>> start(const AgentProcessOptions& options);
  // Kills the process group if it still runs, and reaps it.
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // Non-blocking: true once the process has exited and its output is read to the end.
  bool poll();
  // SIGKILL to the process group.
  void kill();
  // After poll() returned true: how it ended ("exit 0", "signal 9 (Killed)") and whether it
  // exited with status 0.
  std::string describe_exit() const;
  bool succeeded() const;
  // The `reward` of the last stdout line that is a JSON object with a numeric `reward`.
  std::optional<double> reward() const;
  std::string stderr_tail() const;
  pid_t pid() const { return pid_; }

 private:
  AgentProcess() = default;
  void read_output(int out_fd, int err_fd);
  void take_line(const std::string& line);

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::thread reader_;
  int64_t max_line_bytes_ = 0;
  int64_t stderr_tail_bytes_ = 0;
  mutable absl::Mutex mu_;
  bool output_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<double> reward_ ABSL_GUARDED_BY(mu_);
  std::string stderr_tail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::rollout::agent
