// One run of the agent command: started with fork + exec in its own process group (killed with
// it, and by the kernel when the worker dies), stdout and stderr read by a thread of its own.
// Its stdin is either fixed data (a memfd: any size, never a blocked writer), or, for a
// persistent agent that runs episode after episode (rollout.agent.mode: persistent), a socket
// the runner writes one JSON line per episode to without ever blocking; the agent answers each
// with a line {"episode_id": ..., "done": true, ...} on stdout.
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
  std::vector<std::string> command;           // command[0]: a path or a name on PATH
  std::string working_dir;                    // "" = the worker's
  std::map<std::string, std::string> env;     // added to (or replacing in) the worker's
  std::string stdin_data;                     // with keep_stdin_open false: all of stdin, then EOF
  bool keep_stdin_open = false;               // true: stdin stays open for send()
  int64_t max_line_bytes = int64_t{1} << 20;  // longer stdout lines are not read for a reward
  int64_t stderr_tail_bytes = 4096;           // kept for the error message of a failed run
};

// A line {"episode_id": ID, "done": true, "reward"?: number, "error"?: string} of a persistent
// agent: it finished episode ID (with an error when "error" is a string).
struct EpisodeDone {
  std::string episode_id;
  std::optional<double> reward;
  std::optional<std::string> error;
};

class AgentProcess {
 public:
  // Unavailable when the command cannot be started (not found, fork fails).
  static absl::StatusOr<std::unique_ptr<AgentProcess>> start(const AgentProcessOptions& options);
  // Kills the process group if it still runs, and reaps it.
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // Non-blocking: true once the process has exited and its output is read to the end. Also
  // writes what send() could not write yet.
  bool poll();
  // keep_stdin_open: queues `data` for stdin and writes what the socket takes now, never
  // blocking; what an exited agent no longer reads is dropped.
  void send(const std::string& data);
  // The done lines read since the last call, in order.
  std::vector<EpisodeDone> take_done();
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
  void flush_stdin();

  pid_t pid_ = -1;
  int stdin_fd_ = -1;   // keep_stdin_open: the runner's end of the socket
  std::string unsent_;  // queued for stdin
  bool reaped_ = false;
  int status_ = 0;
  std::thread reader_;
  int64_t max_line_bytes_ = 0;
  int64_t stderr_tail_bytes_ = 0;
  mutable absl::Mutex mu_;
  bool output_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<double> reward_ ABSL_GUARDED_BY(mu_);
  std::vector<EpisodeDone> done_ ABSL_GUARDED_BY(mu_);
  std::string stderr_tail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::rollout::agent
