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

// "exit 3", "signal 9 (Killed)".
std::string describe_exit(int status);

// Full path of `name` on PATH; "" when absent.
std::string find_on_path(const std::string& name);

}  // namespace flywheel::launcher
