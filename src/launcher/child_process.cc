#include "flywheel/launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace flywheel::launcher {

ExecArgs::ExecArgs(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env)
    : args_(argv) {
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_.push_back(std::move(entry));
  }
  for (const auto& [name, value] : env) env_.push_back(name + "=" + value);
  for (std::string& a : args_) argv_.push_back(a.data());
  argv_.push_back(nullptr);
  for (std::string& e : env_) envp_.push_back(e.data());
  envp_.push_back(nullptr);
}

absl::StatusOr<ChildProcess> ChildProcess::start(const ChildOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("no program to start");
  const ExecArgs exec(options.argv, options.env);  // before fork
  std::string program = options.argv[0];
  if (program.find('/') == std::string::npos) program = find_on_path(program);
  if (program.empty()) {
    return absl::NotFoundError(absl::StrCat("'", options.argv[0], "' is not on PATH"));
  }
  int log_fd = -1;
  if (!options.log_file.empty()) {
    log_fd = open(options.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ", options.log_file, ": ", std::strerror(errno)));
    }
  }
  // Children do not read the terminal: a background process group reading it would stop.
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (null_fd >= 0 && pid != 0) close(null_fd);  // the child keeps it for its stdin
  if (pid < 0) {
    if (log_fd >= 0) close(log_fd);
    return absl::UnavailableError(absl::StrCat("fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the launcher died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the launcher blocks signals; children must not
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execve(program.c_str(), exec.argv(), exec.envp());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  setpgid(pid, pid);  // also here: no window in which a signal to the group misses it
  ChildProcess child;
  child.pid_ = pid;
  child.running_ = true;
  return child;
}

void ChildProcess::signal(int signal) const {
  if (running_) kill(-pid_, signal);
}

bool ChildProcess::poll(int* status) {
  if (!running_) return true;
  const pid_t r = waitpid(pid_, status, WNOHANG);
  if (r == pid_) {
    running_ = false;
    kill(-pid_, SIGKILL);  // whatever the child left in its group (e.g. mpirun's ranks)
    return true;
  }
  return false;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("status ", status);
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace flywheel::launcher
