// A child process of `flywheel train`: started with fork + exec in its own process group (the
// terminal's Ctrl-C reaches the launcher only, which decides how to stop it) and killed by the
// kernel when the launcher dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::launcher {

struct ChildOptions {
  std::vector<std::string> argv;           // argv[0] is the program (a path or a PATH name)
  std::map<std::string, std::string> env;  // added to (or replacing in) the environment
  std::string log_file;                    // stdout and stderr appended here; "" = inherited
};

class ChildProcess {
 public:
  // Unavailable when fork or exec fails (exec failure is reported by the child's exit 127).
  static absl::StatusOr<ChildProcess> start(const ChildOptions& options);

  pid_t pid() const { return pid_; }
  // Sends `signal` to the child's whole process group.
  void signal(int signal) const;
  // Non-blocking: true once the child exited; `status` gets waitpid's status.
  bool poll(int* status);
  bool running() const { return running_; }

 private:
  pid_t pid_ = -1;
  bool running_ = false;
};

// What execve() takes, built before fork() (after it only async-signal-safe calls may run):
// argv, and this process's environment with `env` added (or replacing), as char* arrays that
// point into strings this object owns. Not copyable: the arrays point into its own strings.
class ExecArgs {
 public:
  ExecArgs(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

// "exit 3", "signal 9 (Killed)".
std::string describe_exit(int status);

// Full path of `name` on PATH; "" when absent.
std::string find_on_path(const std::string& name);

}  // namespace flywheel::launcher
