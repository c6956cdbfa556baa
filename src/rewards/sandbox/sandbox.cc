#include "sandbox/sandbox.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "sandbox/launch_plan.h"
#include "sandbox/sandbox_cgroups.h"
#include "sandbox/sandbox_child.h"
#include "sandbox/sandbox_watch.h"

#ifndef SYS_close_range  // older headers (Linux 5.9)
#define SYS_close_range 436
#endif

namespace flywheel::rewards {
namespace sandbox_internal {

std::string errno_text(int error) {
  char buffer[256];
  return strerror_r(error, buffer, sizeof buffer);  // GNU strerror_r: returns the text
}

absl::Status os_error(absl::string_view what, int error) {
  return absl::InternalError(absl::StrCat("sandbox: ", what, ": ", errno_text(error)));
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace sandbox_internal

namespace {

using sandbox_internal::ChildPlan;
using sandbox_internal::conclude;
using sandbox_internal::errno_text;
using sandbox_internal::find_cgroups;
using sandbox_internal::LaunchHeader;
using sandbox_internal::os_error;
using sandbox_internal::parse_report;
using sandbox_internal::RecordHeader;
using sandbox_internal::RunCgroups;
using sandbox_internal::RunEnd;
using sandbox_internal::UniqueFd;
using sandbox_internal::watch;
using sandbox_internal::WatchedRun;
using sandbox_internal::write_all;
using Clock = std::chrono::steady_clock;

absl::Status make_pipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return os_error("pipe2");
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  return absl::OkStatus();
}

bool is_plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

absl::Status validate_request(const SandboxRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return absl::InvalidArgumentError("sandbox: argv is empty");
  }
  if (request.argv[0].find('/') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("sandbox: argv[0] '", request.argv[0],
                                                   "' must be a path (PATH is not searched)"));
  }
  for (const std::string& arg : request.argv) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("sandbox: an argument holds a NUL byte");
    }
  }
  for (const SandboxFile& file : request.files) {
    if (!is_plain_name(file.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox: file name '", file.name, "' is not a plain name"));
    }
  }
  for (const std::string& name : request.output_files) {
    if (!is_plain_name(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox: output file name '", name, "' is not a plain name"));
    }
  }
  return absl::OkStatus();
}

// The launcher executable: $FLYWHEEL_SANDBOX_INIT when set, else flywheel_sandbox_init next to
// the library holding this code (build tree and install alike).
std::string launcher_path() {
  if (const char* env = getenv("FLYWHEEL_SANDBOX_INIT"); env != nullptr && *env != '\0') {
    return env;
  }
  static const std::string beside_library = [] {
    Dl_info info = {};
    std::string dir = ".";
    if (dladdr(reinterpret_cast<void*>(&launcher_path), &info) != 0 && info.dli_fname != nullptr) {
      std::error_code ignored;
      std::filesystem::path lib = std::filesystem::canonical(info.dli_fname, ignored);
      if (lib.empty()) lib = info.dli_fname;
      dir = lib.parent_path().string();
    }
    return absl::StrCat(dir, "/", sandbox_internal::kLauncherName);
  }();
  return beside_library;
}

// What the vfork-style child of the caller does before execve() of the launcher. It shares the
// caller's memory (CLONE_VM) but not its descriptors or signal handlers.
struct SpawnArgs {
  const char* path;
  int fds[5];  // become 0-4 of the launcher
  int exec_errno = 0;
};

int spawn_main(void* arg) {
  SpawnArgs* args = static_cast<SpawnArgs*>(arg);
  // Handlers of the caller must not run on this shared memory: back to the defaults (ignored
  // signals stay ignored until the launcher resets them), then unblock.
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old = {};
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler != SIG_IGN) sigaction(sig, &action, nullptr);
  }
  int moved[5];
  for (int i = 0; i < 5; ++i) {
    moved[i] = fcntl(args->fds[i], F_DUPFD_CLOEXEC, 16);
    if (moved[i] < 0) {
      args->exec_errno = errno;
      _exit(127);
    }
  }
  for (int i = 0; i < 5; ++i) {
    if (dup2(moved[i], i) < 0) {  // dup2 clears close-on-exec
      args->exec_errno = errno;
      _exit(127);
    }
  }
  syscall(SYS_close_range, 5, ~0U, 0);  // best effort (Linux 5.9); the init closes them anyway
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  char* const argv[] = {const_cast<char*>(args->path), nullptr};
  char* const envp[] = {nullptr};
  execve(args->path, argv, envp);  // every other descriptor of the caller is close-on-exec...
  args->exec_errno = errno;        // ...or closed by the init (close_range) before the program
  _exit(127);
}

}  // namespace

absl::Status SandboxOptions::validate() const {
  if (!(wall_timeout_s > 0) || wall_timeout_s > 86400) {
    return absl::InvalidArgumentError("sandbox: wall_timeout_s must be in (0, 86400]");
  }
  if (cpu_s != kAuto && !(cpu_s >= 1)) {
    return absl::InvalidArgumentError("sandbox: cpu_s must be >= 1 (or kAuto)");
  }
  if (memory_bytes < (int64_t{16} << 20)) {
    return absl::InvalidArgumentError("sandbox: memory_bytes must be >= 16 MiB");
  }
  if (max_processes < 2) return absl::InvalidArgumentError("sandbox: max_processes must be >= 2");
  if (max_open_files < 8) return absl::InvalidArgumentError("sandbox: max_open_files must be >= 8");
  if (max_file_bytes < 0 || max_stdout_bytes < 0 || max_stderr_bytes < 0 ||
      max_output_file_bytes < 0) {
    return absl::InvalidArgumentError("sandbox: byte limits must be >= 0");
  }
  if (tmpfs_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("sandbox: tmpfs_bytes must be >= 1 MiB");
  }
  if (total_memory_bytes != kAutoBytes && total_memory_bytes < (int64_t{16} << 20)) {
    return absl::InvalidArgumentError("sandbox: total_memory_bytes must be >= 16 MiB (or kAuto)");
  }
  for (const std::string& path : read_only_paths) {
    if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos ||
        path.size() >= 2048) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox: read_only_paths entry '", path, "' is not an absolute path"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::create(const SandboxOptions& options) {
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  if (access(launcher_path().c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "code sandbox: its launcher ", launcher_path(), " is missing or not executable (",
        errno_text(errno), "); install ", sandbox_internal::kLauncherName,
        " next to libflywheel_rewards.so or set FLYWHEEL_SANDBOX_INIT to its path"));
  }
  const bool root = geteuid() == 0;
  std::vector<Mode> candidates;
  if (!options.simulate_namespace_refusal) {
    candidates.push_back({/*user_namespace=*/true, /*namespaces=*/true, /*network=*/true});
    if (root) candidates.push_back({false, true, true});
    if (options.allow_network_fallback) {
      candidates.push_back({true, true, false});
      if (root) candidates.push_back({false, true, false});
    }
  }
  if (options.allow_network_fallback) candidates.push_back({false, false, false});

  std::vector<std::string> refused;
  if (options.simulate_namespace_refusal) refused.push_back("namespaces: refused (simulated)");
  const Cgroups cgroups = options.cgroups ? find_cgroups() : Cgroups{};
  if (options.cgroups && cgroups.version == 0) {
    return absl::FailedPreconditionError(
        "code sandbox: cgroups were asked for, but this process can make no memory cgroup (cgroup "
        "v2 with memory and pids delegated to its cgroup, or a writable v1 memory hierarchy)");
  }
  SandboxRequest probe;
  probe.argv = {"/bin/true"};
  for (const Mode& mode : candidates) {
    std::unique_ptr<Sandbox> sandbox(new Sandbox(options, mode, cgroups));
    absl::StatusOr<SandboxResult> result = sandbox->run_in_mode(probe, mode, /*probe=*/true);
    if (result.ok() && result->success()) {
      if (!mode.network_namespace) {
        FLYWHEEL_LOG_WARN(
            "code sandbox: the kernel refused the namespaces (%s); running with %s as "
            "allow_network_fallback permits: programs can reach the network",
            absl::StrJoin(refused, "; "), sandbox->isolation());
      }
      return sandbox;
    }
    refused.push_back(absl::StrCat(Sandbox(options, mode, cgroups).isolation(), ": ",
                                   result.ok() ? "probe failed" : result.status().message()));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "code sandbox: the kernel refused the namespaces it needs (", absl::StrJoin(refused, "; "),
      "); set allow_network_fallback: true to run untrusted code without a network namespace "
      "(and, if those are refused too, without any namespace: weaker containment)"));
}

std::string Sandbox::isolation() const {
  std::string out;
  if (!mode_.namespaces) {
    out = "no namespaces (process group and rlimits only)";
  } else {
    out = mode_.user_namespace ? "user+pid" : "pid";
    absl::StrAppend(&out, "+mount", mode_.network_namespace ? "+net" : "",
                    "+ipc+uts+cgroup namespaces, empty root");
    if (!mode_.user_namespace) absl::StrAppend(&out, ", uid ", options_.unprivileged_uid);
  }
  if (cgroups_.version == 0) {
    absl::StrAppend(&out, ", memfd and shm refused");
  } else {
    absl::StrAppend(&out, ", cgroup v", cgroups_.version, " memory",
                    cgroups_.version == 2 || !cgroups_.pids.empty() ? " + pids" : "");
  }
  return out;
}

absl::StatusOr<SandboxResult> Sandbox::run(const SandboxRequest& request) const {
  return run_in_mode(request, mode_, /*probe=*/false);
}

absl::StatusOr<SandboxResult> Sandbox::run_in_mode(const SandboxRequest& request, Mode mode,
                                                   bool probe) const {
  FLYWHEEL_RETURN_IF_ERROR(validate_request(request));
  const bool root = geteuid() == 0;

  // The host directory gives the run a unique name; with a mount namespace the program sees a
  // directory of that name in its private /tmp instead.
  char workdir_template[] = "/tmp/flywheel-sbx-XXXXXX";
  if (mkdtemp(workdir_template) == nullptr) return os_error("mkdtemp /tmp/flywheel-sbx-XXXXXX");
  const std::string workdir = workdir_template;
  struct WorkdirRemover {
    const std::string& path;
    ~WorkdirRemover() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remover{workdir};
  if (!mode.namespaces && root &&
      chown(workdir.c_str(), options_.unprivileged_uid, options_.unprivileged_gid) != 0) {
    return os_error("chown " + workdir);
  }

  // stdin is a memfd: no writer to keep up with the program, any size, never SIGPIPE. The
  // program gets a read-only descriptor of it.
  UniqueFd stdin_fd;
  {
    UniqueFd memfd(static_cast<int>(syscall(SYS_memfd_create, "sandbox-stdin", MFD_CLOEXEC)));
    if (memfd.get() < 0) return os_error("memfd_create");
    if (!write_all(memfd.get(), request.stdin_data.data(), request.stdin_data.size())) {
      return os_error("writing stdin");
    }
    stdin_fd.reset(open(absl::StrCat("/proc/self/fd/", memfd.get()).c_str(), O_RDONLY | O_CLOEXEC));
    if (stdin_fd.get() < 0) return os_error("reopening stdin read-only");
  }
  UniqueFd out_r, out_w, err_r, err_w, report_r, report_w;
  for (auto [r, w] :
       {std::pair{&out_r, &out_w}, std::pair{&err_r, &err_w}, std::pair{&report_r, &report_w}}) {
    FLYWHEEL_RETURN_IF_ERROR(make_pipe(r, w));
  }

  // Everything the launcher needs (sandbox_child.h, LaunchHeader), in a memfd.
  RunCgroups cgroups(cgroups_, std::filesystem::path(workdir).filename().string());
  const int64_t total_memory = options_.total_memory_bytes == SandboxOptions::kAutoBytes
                                   ? options_.memory_bytes
                                   : options_.total_memory_bytes;
  FLYWHEEL_RETURN_IF_ERROR(cgroups.make(total_memory, options_.max_processes));
  LaunchPlanInput plan_input{request, options_, mode};
  plan_input.probe = probe;
  plan_input.root = root;
  plan_input.workdir = workdir;
  plan_input.cgroup_procs = cgroups.procs();
  plan_input.deny_memfd = cgroups_.version == 0;
  const std::string plan = launch_plan(plan_input);
  UniqueFd plan_fd(static_cast<int>(syscall(SYS_memfd_create, "sandbox-plan", MFD_CLOEXEC)));
  if (plan_fd.get() < 0) return os_error("memfd_create");
  if (!write_all(plan_fd.get(), plan.data(), plan.size())) return os_error("writing the plan");

  // Start the launcher without copying this (possibly large) process: the child shares its
  // memory and this thread waits (CLONE_VFORK) until it has called execve(). Signals stay
  // blocked meanwhile so that none of the caller's handlers runs on the child's stack.
  const std::string launcher = launcher_path();
  SpawnArgs spawn{launcher.c_str(),
                  {stdin_fd.get(), out_w.get(), err_w.get(), report_w.get(), plan_fd.get()}};
  constexpr size_t kSpawnStackBytes = 64 << 10;
  std::unique_ptr<char[]> spawn_stack(new char[kSpawnStackBytes]);
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const Clock::time_point start = Clock::now();
  int pidfd_value = -1;
  int clone_flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;
  long pid =
      clone(spawn_main, spawn_stack.get() + kSpawnStackBytes, clone_flags, &spawn, &pidfd_value);
  if (pid < 0 && errno == EINVAL) {  // before Linux 5.2: no CLONE_PIDFD; poll waitpid instead
    clone_flags &= ~CLONE_PIDFD;
    pidfd_value = -1;
    pid = clone(spawn_main, spawn_stack.get() + kSpawnStackBytes, clone_flags, &spawn);
  }
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("sandbox: starting ", launcher, ": clone: ", errno_text(clone_errno)));
  }
  UniqueFd pidfd(pidfd_value);
  stdin_fd.reset();
  out_w.reset();
  err_w.reset();
  report_w.reset();
  plan_fd.reset();
  if (spawn.exec_errno != 0) {
    waitpid(static_cast<pid_t>(pid), nullptr, 0);
    return absl::FailedPreconditionError(absl::StrCat("sandbox: executing the launcher ", launcher,
                                                      ": ", errno_text(spawn.exec_errno)));
  }

  // Read stdout, stderr and the report while waiting for the end or the deadline.
  WatchedRun watched{pid, mode.namespaces, &pidfd, &out_r, &err_r, &report_r};
  watched.stdout_cap = options_.max_stdout_bytes;
  watched.stderr_cap = options_.max_stderr_bytes;
  watched.report_cap =
      options_.max_output_file_bytes * static_cast<int64_t>(request.output_files.size()) +
      (int64_t{1} << 16);
  watched.kill_on_stdout_overflow = options_.kill_on_stdout_overflow;
  watched.start = start;
  watched.deadline =
      start +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
          request.wall_timeout_s > 0 ? std::min(request.wall_timeout_s, options_.wall_timeout_s)
                                     : options_.wall_timeout_s));
  SandboxResult result;
  std::string report_bytes;
  absl::StatusOr<RunEnd> end = watch(watched, &result, &report_bytes);
  cgroups.read_stats(&result);
  cgroups.remove();
  if (!end.ok()) return end.status();
  const std::string program =
      probe ? std::string() : absl::StrCat(" (argv[0] '", request.argv[0], "')");
  FLYWHEEL_RETURN_IF_ERROR(
      conclude(parse_report(report_bytes, request), *end, isolation(), program, &result));
  return result;
}

}  // namespace flywheel::rewards
