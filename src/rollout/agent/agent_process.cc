#include "agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"
#include "flywheel/launcher/child_process.h"

namespace flywheel::rollout::agent {
namespace {

absl::Status os_error(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AgentProcess>> AgentProcess::start(
    const AgentProcessOptions& options) {
  if (options.command.empty() || options.command[0].empty()) {
    return absl::InvalidArgumentError("rollout.agent.command: no program");
  }
  std::string program = options.command[0];
  if (program.find('/') == std::string::npos) program = launcher::find_on_path(program);
  if (program.empty()) {
    return absl::NotFoundError(
        absl::StrCat("rollout.agent.command: '", options.command[0], "' is not on PATH"));
  }
  if (program[0] != '/' && !options.working_dir.empty()) {
    program = absl::StrCat(options.working_dir, "/", program);
  }
  program = std::filesystem::absolute(program).string();  // the child changes directory first
  if (access(program.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("rollout.agent.command: ", program, " is not an executable file"));
  }
  const launcher::ExecArgs exec(options.command, options.env);  // before fork

  // stdin: fixed data in a memfd, or one end of a socket (writes to it never raise SIGPIPE).
  int in_fd = -1, keep_fd = -1;
  if (options.keep_stdin_open) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return os_error("socketpair");
    in_fd = pair[0];
    keep_fd = pair[1];
    shutdown(in_fd, SHUT_WR);    // the agent's end only reads
    shutdown(keep_fd, SHUT_RD);  // the runner's only writes
    fcntl(keep_fd, F_SETFL, fcntl(keep_fd, F_GETFL) | O_NONBLOCK);
  } else {
    in_fd = memfd_create("flywheel-agent-stdin", MFD_CLOEXEC);
    if (in_fd < 0) return os_error("memfd_create");
    for (size_t done = 0; done < options.stdin_data.size();) {
      const ssize_t n =
          write(in_fd, options.stdin_data.data() + done, options.stdin_data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        close(in_fd);
        return os_error("writing the agent's stdin");
      }
      done += static_cast<size_t>(n);
    }
    lseek(in_fd, 0, SEEK_SET);
  }
  auto close_stdin = [&] {
    close(in_fd);
    if (keep_fd >= 0) close(keep_fd);
  };
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close_stdin();
    return os_error("pipe");
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close_stdin();
    close(out[0]);
    close(out[1]);
    return os_error("pipe");
  }
  const char* dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close_stdin();
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return os_error("fork");
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(in_fd, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (dir != nullptr && chdir(dir) != 0) _exit(126);
    execve(program.c_str(), exec.argv(), exec.envp());
    _exit(127);
  }
  setpgid(pid, pid);
  close(in_fd);
  close(out[1]);
  close(err[1]);
  std::unique_ptr<AgentProcess> process(new AgentProcess());
  process->pid_ = pid;
  process->stdin_fd_ = keep_fd;
  if (!options.stdin_data.empty() && keep_fd >= 0) process->send(options.stdin_data);
  process->max_line_bytes_ = options.max_line_bytes;
  process->stderr_tail_bytes_ = options.stderr_tail_bytes;
  const int out_fd = out[0], err_fd = err[0];
  process->reader_ =
      std::thread([p = process.get(), out_fd, err_fd] { p->read_output(out_fd, err_fd); });
  return process;
}

AgentProcess::~AgentProcess() {
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  if (reader_.joinable()) reader_.join();  // the pipes close with the process group
  if (stdin_fd_ >= 0) close(stdin_fd_);
}

void AgentProcess::send(const std::string& data) {
  if (stdin_fd_ < 0) return;
  unsent_ += data;
  flush_stdin();
}

void AgentProcess::flush_stdin() {
  while (stdin_fd_ >= 0 && !unsent_.empty()) {
    const ssize_t n = ::send(stdin_fd_, unsent_.data(), unsent_.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // the agent reads later
    if (n < 0) {  // it closed its stdin or exited: nothing more reaches it
      close(stdin_fd_);
      stdin_fd_ = -1;
      unsent_.clear();
      return;
    }
    unsent_.erase(0, static_cast<size_t>(n));
  }
}

std::vector<EpisodeDone> AgentProcess::take_done() {
  absl::MutexLock lock(&mu_);
  return std::exchange(done_, {});
}

void AgentProcess::take_line(const std::string& line) {
  if (line.empty() || line.front() != '{') return;
  absl::StatusOr<core::Json> json = core::Json::parse(line);
  if (!json.ok() || !json->is_object()) return;
  const core::Json* reward = json->find("reward");
  const bool has_reward = reward != nullptr && reward->is_number();
  const core::Json* episode = json->find("episode_id");
  const core::Json* done = json->find("done");
  absl::MutexLock lock(&mu_);
  if (has_reward) reward_ = reward->as_double();
  if (episode != nullptr && episode->is_string() && done != nullptr && done->is_bool() &&
      done->as_bool()) {
    EpisodeDone d;
    d.episode_id = episode->as_string();
    if (has_reward) d.reward = reward->as_double();
    const core::Json* error = json->find("error");
    if (error != nullptr && error->is_string()) d.error = error->as_string();
    done_.push_back(std::move(d));
  }
}

void AgentProcess::read_output(int out_fd, int err_fd) {
  std::string line;
  bool line_too_long = false;
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_fds = 2;
  char buffer[8192];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (pollfd& f : fds) {
      if (f.fd < 0 || f.revents == 0) continue;
      const ssize_t n = read(f.fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(f.fd);
        f.fd = -1;
        --open_fds;
        continue;
      }
      if (f.fd == out_fd) {
        for (ssize_t i = 0; i < n; ++i) {
          if (buffer[i] == '\n') {
            if (!line_too_long) take_line(line);
            line.clear();
            line_too_long = false;
          } else if (static_cast<int64_t>(line.size()) < max_line_bytes_) {
            line.push_back(buffer[i]);
          } else {
            line_too_long = true;
          }
        }
      } else {
        absl::MutexLock lock(&mu_);
        stderr_tail_.append(buffer, static_cast<size_t>(n));
        if (static_cast<int64_t>(stderr_tail_.size()) > 2 * stderr_tail_bytes_) {
          stderr_tail_.erase(0, stderr_tail_.size() - static_cast<size_t>(stderr_tail_bytes_));
        }
      }
    }
  }
  if (!line_too_long) take_line(line);  // a last line without its newline
  absl::MutexLock lock(&mu_);
  output_done_ = true;
}

bool AgentProcess::poll() {
  flush_stdin();
  if (!reaped_) {
    const pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r != pid_) return false;
    reaped_ = true;
    ::kill(-pid_, SIGKILL);  // whatever it left in its group, which may hold the pipes open
  }
  absl::MutexLock lock(&mu_);
  return output_done_;
}

void AgentProcess::kill() {
  if (!reaped_) ::kill(-pid_, SIGKILL);
}

std::string AgentProcess::describe_exit() const { return launcher::describe_exit(status_); }

bool AgentProcess::succeeded() const {
  return reaped_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 0;
}

std::optional<double> AgentProcess::reward() const {
  absl::MutexLock lock(&mu_);
  return reward_;
}

std::string AgentProcess::stderr_tail() const {
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(stderr_tail_.size()) <= stderr_tail_bytes_) return stderr_tail_;
  return stderr_tail_.substr(stderr_tail_.size() - static_cast<size_t>(stderr_tail_bytes_));
}

}  // namespace flywheel::rollout::agent
