// flywheel_sandbox_init: the launcher Sandbox::run() starts with a vfork-style clone + execve,
// so that a large caller (LibTorch-linked) never has its page tables copied per run. It reads
// the plan (sandbox_child.h, LaunchHeader) from descriptor 4, makes the namespaced init with
// clone() (cheap: this process is small), writes the init's uid / gid maps, lets it go, waits
// for it and exits as it did (killed by SIGKILL when it was). SIGTERM makes it kill the init
// and exit once the whole PID namespace is gone; SIGKILL (or the caller's death) kills the init
// through PR_SET_PDEATHSIG without waiting.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "sandbox/sandbox_child.h"

namespace {

using flywheel::rewards::sandbox_internal::ChildPlan;
using flywheel::rewards::sandbox_internal::kLaunchMagic;
using flywheel::rewards::sandbox_internal::LaunchHeader;
using flywheel::rewards::sandbox_internal::PlannedFile;
using flywheel::rewards::sandbox_internal::RecordHeader;
using flywheel::rewards::sandbox_internal::SetupStage;

constexpr int kReportFd = 3;
constexpr int kFailedExit = 127;

[[noreturn]] void fail(SetupStage stage, int error) {
  RecordHeader header{flywheel::rewards::sandbox_internal::kSetupError, stage, error, 0};
  ssize_t ignored = write(kReportFd, &header, sizeof header);
  (void)ignored;
  _exit(kFailedExit);
}

class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  // A NUL-terminated string of the plan, or nullptr when the plan is cut short.
  const char* next(size_t* length = nullptr) {
    uint64_t n = 0;
    if (size_ - pos_ < sizeof n) return nullptr;
    std::memcpy(&n, data_ + pos_, sizeof n);
    pos_ += sizeof n;
    if (size_ - pos_ < n + 1 || data_[pos_ + n] != '\0') return nullptr;
    const char* out = data_ + pos_;
    pos_ += n + 1;
    if (length != nullptr) *length = n;
    return out;
  }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = sizeof(LaunchHeader);
};

// The init, for the SIGTERM handler: the caller's way of ending a run (timeout, output cap).
volatile pid_t g_init_pid = 0;

void on_sigterm(int) {
  // Kill pid 1 of the namespace; the kernel then kills the rest, and waitpid() below returns
  // once every process of the namespace is gone, so the caller never returns early.
  if (g_init_pid > 0) kill(g_init_pid, SIGKILL);
}

bool write_file(pid_t pid, const char* name, const char* text) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), name);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t size = std::strlen(text);
  bool ok = write(fd, text, size) == static_cast<ssize_t>(size);
  int error = errno;
  close(fd);
  errno = error;
  return ok;
}

// Writes `pid` into each cgroup.procs file of `procs`.
bool join_cgroups(const std::vector<const char*>& procs, pid_t pid) {
  char text[32];
  std::snprintf(text, sizeof text, "%d\n", static_cast<int>(pid));
  for (const char* path : procs) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const size_t size = std::strlen(text);
    const bool ok = write(fd, text, size) == static_cast<ssize_t>(size);
    const int error = errno;
    close(fd);
    errno = error;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

int main() {
  // The caller dying (or killing us at its timeout) ends the init, hence the namespace.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  flywheel::rewards::sandbox_internal::reset_signals();  // the caller's ignored signals

  struct stat st = {};
  if (fstat(flywheel::rewards::sandbox_internal::kLauncherPlanFd, &st) != 0 ||
      st.st_size < static_cast<off_t>(sizeof(LaunchHeader))) {
    fail(flywheel::rewards::sandbox_internal::kStageLauncher, errno ? errno : EINVAL);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE,
                   flywheel::rewards::sandbox_internal::kLauncherPlanFd, 0);
  if (map == MAP_FAILED) fail(flywheel::rewards::sandbox_internal::kStageLauncher, errno);
  close(flywheel::rewards::sandbox_internal::kLauncherPlanFd);
  const char* data = static_cast<const char*>(map);
  LaunchHeader header;
  std::memcpy(&header, data, sizeof header);
  if (header.magic != kLaunchMagic || header.size != sizeof header) {
    fail(flywheel::rewards::sandbox_internal::kStageLauncher, EINVAL);
  }

  Reader reader(data, size);
  bool ok = true;
  auto next = [&](size_t* length = nullptr) {
    const char* s = reader.next(length);
    if (s == nullptr) ok = false;
    return s;
  };
  ChildPlan plan;
  plan.user_namespace = header.user_namespace != 0;
  plan.namespaces = header.namespaces != 0;
  plan.allow_setgroups = header.allow_setgroups != 0;
  plan.drop_to_uid = header.drop_to_uid != 0;
  plan.uid = header.uid;
  plan.gid = header.gid;
  plan.probe = header.probe != 0;
  plan.stdin_fd = 0;
  plan.stdout_fd = 1;
  plan.stderr_fd = 2;
  plan.report_fd = kReportFd;
  plan.workdir = next();
  plan.tmpfs_data = next();
  std::vector<char*> argv, envp;
  for (uint64_t i = 0; ok && i < header.num_args; ++i) argv.push_back(const_cast<char*>(next()));
  argv.push_back(nullptr);
  for (uint64_t i = 0; ok && i < header.num_env; ++i) envp.push_back(const_cast<char*>(next()));
  envp.push_back(nullptr);
  std::vector<PlannedFile> files;
  for (uint64_t i = 0; ok && i < header.num_files; ++i) {
    PlannedFile file = {};
    file.name = next();
    size_t mode_length = 0;
    const char* mode = next(&mode_length);
    if (!ok || mode_length != sizeof(uint32_t)) {
      ok = false;
      break;
    }
    uint32_t mode_value = 0;
    std::memcpy(&mode_value, mode, sizeof mode_value);
    file.mode = mode_value;
    file.data = next(&file.size);
    files.push_back(file);
  }
  std::vector<const char*> outputs;
  for (uint64_t i = 0; ok && i < header.num_outputs; ++i) outputs.push_back(next());
  std::vector<const char*> binds, link_paths, link_targets, cgroups;
  for (uint64_t i = 0; ok && i < header.num_binds; ++i) {
    const char* bind = next();
    if (ok && (bind[0] != 'D' && bind[0] != 'F')) ok = false;
    binds.push_back(bind);
  }
  for (uint64_t i = 0; ok && i < header.num_links; ++i) {
    link_paths.push_back(next());
    link_targets.push_back(next());
  }
  for (uint64_t i = 0; ok && i < header.num_cgroups; ++i) cgroups.push_back(next());
  if (!ok || header.num_args == 0) {
    fail(flywheel::rewards::sandbox_internal::kStageLauncher, EINVAL);
  }
  plan.files = files.data();
  plan.num_files = files.size();
  plan.output_files = outputs.data();
  plan.num_output_files = outputs.size();
  plan.max_output_file_bytes = header.max_output_file_bytes;
  plan.binds = binds.data();
  plan.num_binds = binds.size();
  plan.link_paths = link_paths.data();
  plan.link_targets = link_targets.data();
  plan.num_links = link_paths.size();
  plan.deny_memfd = header.deny_memfd != 0;
  for (int i = 0; i < ChildPlan::kNumLimits; ++i) {
    plan.limit_resources[i] = header.limit_resources[i];
    plan.limits[i] = {static_cast<rlim_t>(header.limit_cur[i]),
                      static_cast<rlim_t>(header.limit_max[i])};
  }
  plan.exec_path = argv[0];
  plan.argv = argv.data();
  plan.envp = envp.data();

  int sync[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) != 0) {
    fail(flywheel::rewards::sandbox_internal::kStageSync, errno);
  }
  plan.sync_fd = sync[0];
  if (!plan.namespaces) {
    // No namespace to make: this process is the init (setsid: the caller kills its group).
    if (!join_cgroups(cgroups, getpid())) {
      fail(flywheel::rewards::sandbox_internal::kStageCgroup, errno);
    }
    if (send(sync[1], "x", 1, MSG_NOSIGNAL) != 1) {
      fail(flywheel::rewards::sandbox_internal::kStageSync, errno);
    }
    flywheel::rewards::sandbox_internal::run_sandbox_init(plan);
  }

  // SIGTERM stays blocked until the handler knows the init (the init resets its mask).
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, nullptr);
  long pid = syscall(SYS_clone, header.clone_flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) flywheel::rewards::sandbox_internal::run_sandbox_init(plan);
  if (pid < 0) fail(flywheel::rewards::sandbox_internal::kStageClone, errno);
  g_init_pid = static_cast<pid_t>(pid);
  struct sigaction on_term = {};
  on_term.sa_handler = on_sigterm;
  sigaction(SIGTERM, &on_term, nullptr);
  sigprocmask(SIG_UNBLOCK, &term, nullptr);
  close(sync[0]);
  auto abandon = [&](int error) {
    kill(static_cast<pid_t>(pid), SIGKILL);
    waitpid(static_cast<pid_t>(pid), nullptr, 0);
    fail(flywheel::rewards::sandbox_internal::kStageIdMaps, error);
  };
  // The init (and all it starts) in the run's cgroups before it runs anything.
  if (!join_cgroups(cgroups, static_cast<pid_t>(pid))) {
    const int error = errno;
    kill(static_cast<pid_t>(pid), SIGKILL);
    waitpid(static_cast<pid_t>(pid), nullptr, 0);
    fail(flywheel::rewards::sandbox_internal::kStageCgroup, error);
  }
  if (plan.user_namespace) {
    char uid_map[32], gid_map[32];
    std::snprintf(uid_map, sizeof uid_map, "0 %u 1\n", header.map_uid);
    std::snprintf(gid_map, sizeof gid_map, "0 %u 1\n", header.map_gid);
    if ((header.deny_setgroups && !write_file(pid, "setgroups", "deny")) ||
        !write_file(pid, "uid_map", uid_map) || !write_file(pid, "gid_map", gid_map)) {
      abandon(errno);
    }
  }
  if (send(sync[1], "x", 1, MSG_NOSIGNAL) != 1) abandon(errno);
  close(sync[1]);
  // The pipes belong to the init and the program from here on.
  for (int fd = 0; fd <= kReportFd; ++fd) close(fd);

  int status = 0;
  for (;;) {
    long r = waitpid(static_cast<pid_t>(pid), &status, 0);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) _exit(kFailedExit);
  }
  if (WIFSIGNALED(status)) kill(getpid(), SIGKILL);
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : kFailedExit);
}
