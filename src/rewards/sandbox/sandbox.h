// A sandbox for running untrusted programs (model-written code) on Linux.
//
//   FLYWHEEL_ASSIGN_OR_RETURN(auto sandbox, Sandbox::create(SandboxOptions{}));
//   SandboxRequest request;
//   request.argv = {"/usr/bin/python3", "-I", "solution.py"};
//   request.files = {{"solution.py", code}};
//   request.stdin_data = "1 2\n";
//   FLYWHEEL_ASSIGN_OR_RETURN(SandboxResult result, sandbox->run(request));
//
// Each run gets, where the kernel allows it (Sandbox::isolation() says what it got):
// - new user, PID, mount, network, IPC, UTS and cgroup namespaces. The program runs as uid 0 of
//   its own user namespace with every capability dropped (bounding set, ambient, securebits
//   locked, no_new_privs); that uid maps to `unprivileged_uid` (65534, nobody) when the caller is
//   root and to the caller's own uid otherwise. A small init process (pid 1 of the namespace)
//   starts the program and reaps orphans; when the program exits, or the wall clock runs out,
//   the init exits or is killed and the kernel kills everything left in the namespace.
// - an empty root: a tmpfs of tmpfs_bytes holding /tmp with the working directory
//   `/tmp/flywheel-sbx-XXXXXX` (also HOME), /dev with null, zero, full, random, urandom and shm,
//   a fresh /proc showing only the sandbox (a /proc the kernel refuses is an error), a minimal
//   /etc (passwd, group, and the host's ld.so.cache), and, bound read-only and nosuid, only the
//   system's program paths (/usr and the /bin, /sbin, /lib* links or directories) plus
//   `read_only_paths`. The host's other files (datasets, run directories, tokens, TLS keys,
//   /home, /root, /tmp, /run's sockets) do not exist in it. Nothing the program writes reaches
//   the host; the tmpfs vanishes with the namespace and the host directory it was mounted on
//   (made for a unique name) is removed after the run.
// - a bound on the whole run's memory. By default memfd_create and SysV shmget fail with EPERM
//   (seccomp: their pages count against no rlimit), so a run holds at most
//   max_processes x memory_bytes (RLIMIT_AS, RLIMIT_NPROC) + tmpfs_bytes. With `cgroups`, the
//   run gets a memory cgroup of total_memory_bytes (its processes' memory, memfd, shm and tmpfs
//   pages together) and a pids cgroup of max_processes (v2 with both controllers delegated, or
//   v1 memory (+ pids)); a run over its memory is killed by the kernel's OOM killer inside the
//   cgroup (SandboxResult::oom_killed). Moving each run's init into its cgroups costs a cgroup
//   migration (~6-12 ms measured here: an RCU grace period), which is why it is not the
//   default. isolation() says which bound a sandbox has.
// - a network namespace holding only a down loopback: no connection can be made, not even to
//   127.0.0.1 of the host.
// - rlimits: RLIMIT_AS, CPU, NPROC (counted per sandbox, in its user namespace), FSIZE, NOFILE,
//   CORE = 0; the environment PATH=/usr/bin:/bin, HOME=<workdir>, LANG=C.UTF-8 and nothing else;
//   stdin from a memfd; stdout / stderr read concurrently and capped.
//
// When the caller is root but user namespaces are refused, the same namespaces are made without
// one and the program drops to `unprivileged_uid` (RLIMIT_NPROC then counts every process of
// that uid on the host). When the kernel refuses the namespaces, create() fails unless
// `allow_network_fallback` is set; then a run without a network namespace (or, failing that,
// without any namespace: a process group, rlimits and, for root, the unprivileged uid) is used,
// and isolation() says so. In that last mode a program that leaves its process group can
// outlive the run, and files can be written wherever the uid may write.
//
// Not covered: a general seccomp filter (every other syscall is allowed), CPU cgroups, timing
// side channels. Linux >= 5.12 for the namespaced modes (mount_setattr).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::rewards {

struct SandboxOptions {
  static constexpr double kAuto = -1;
  double wall_timeout_s = 5;  // per run; the whole process tree is killed after it; > 0
  double cpu_s = kAuto;       // RLIMIT_CPU per process; kAuto = ceil(wall_timeout_s) + 1
  int64_t memory_bytes = int64_t{1} << 30;  // RLIMIT_AS per process
  // Memory of the whole run (every process, memfd, shm and tmpfs pages) where a memory cgroup
  // can hold it; kAutoBytes = memory_bytes.
  static constexpr int64_t kAutoBytes = -1;
  int64_t total_memory_bytes = kAutoBytes;
  int max_processes = 32;  // RLIMIT_NPROC: tasks (threads count) of the sandbox, >= 2
  int64_t max_file_bytes = int64_t{16} << 20;   // RLIMIT_FSIZE
  int max_open_files = 256;                     // RLIMIT_NOFILE
  int64_t max_stdout_bytes = int64_t{1} << 20;  // kept; the rest is read and discarded
  int64_t max_stderr_bytes = int64_t{64} << 10;
  // Kill the run as soon as stdout passes its cap, instead of reading and discarding the rest
  // until the program ends (stderr past its cap is always discarded).
  bool kill_on_stdout_overflow = false;
  int64_t tmpfs_bytes = int64_t{64} << 20;  // size of the private /tmp holding the workdir
  int64_t max_output_file_bytes = int64_t{64} << 20;  // per file named in output_files
  uint32_t unprivileged_uid = 65534;  // what the program runs as on the host when root (nobody)
  uint32_t unprivileged_gid = 65534;
  // Run without a network namespace, or without any namespace, where the kernel refuses them
  // (see above) instead of failing create().
  bool allow_network_fallback = false;
  // Behave as if the kernel refused every namespace (tests of the fallback path).
  bool simulate_namespace_refusal = false;
  // Each run in memory + pids cgroups of its own (see above); create() fails, naming why, where
  // this process cannot make them.
  bool cgroups = false;
  // Host paths (absolute; directories or files) bound read-only into the empty root besides
  // the system's: an interpreter installed outside /usr, say.
  std::vector<std::string> read_only_paths;

  absl::Status validate() const;
};

// A file placed in the working directory before the program starts.
struct SandboxFile {
  std::string name;  // a plain file name: no '/', not "." or ".."
  std::string contents;
  bool executable = false;  // mode 0755 instead of 0644
};

struct SandboxRequest {
  // argv[0] is the program: an absolute path, or "./name" for a file in the working directory.
  // PATH is not searched.
  std::vector<std::string> argv;
  std::string stdin_data;
  std::vector<SandboxFile> files;
  // Files of the working directory to return after the program exits (e.g. a compiled binary);
  // plain names. A missing one, or one over max_output_file_bytes, is left out of the result.
  std::vector<std::string> output_files;
  // > 0: this run's wall-clock limit (at most the options' wall_timeout_s), e.g. what is left
  // of a caller's deadline.
  double wall_timeout_s = 0;
};

struct SandboxResult {
  int exit_code = -1;             // the program's exit status when it exited; -1 when killed
  int signal = 0;                 // the signal that killed it, else 0
  bool timed_out = false;         // killed at the wall-clock timeout
  bool stdout_truncated = false;  // stdout passed max_stdout_bytes; the rest was discarded
  bool stderr_truncated = false;
  std::string stdout_data;  // at most max_stdout_bytes
  std::string stderr_data;  // at most max_stderr_bytes
  std::map<std::string, std::string> output_files;
  double elapsed_s = 0;  // from start to the end of the whole process tree
  // The run's memory cgroup: its peak usage (-1 when not known) and whether the kernel killed a
  // process of it for going over total_memory_bytes.
  int64_t memory_peak_bytes = -1;
  bool oom_killed = false;

  // Exited with status 0 within the time limit.
  bool success() const { return exit_code == 0 && signal == 0 && !timed_out; }
};

class Sandbox {
 public:
  // Probes which isolation the kernel grants (one run of a setup that exits before exec).
  // FailedPrecondition naming what was refused when the namespaces are refused and
  // allow_network_fallback is false; InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Sandbox>> create(const SandboxOptions& options);

  // Runs request.argv in a fresh sandbox and returns how it ended. Blocks until the program
  // and everything it started are gone: at most wall_timeout_s plus the time to kill them.
  // A timeout, a crash or a non-zero exit are results, not errors. Errors: InvalidArgument for
  // a bad request; FailedPrecondition when the sandbox could not be set up or argv[0] could
  // not be executed; Internal when a system call of the caller fails. Thread-safe.
  absl::StatusOr<SandboxResult> run(const SandboxRequest& request) const;

  // What each run gets, e.g. "user+pid+mount+net+ipc+uts+cgroup namespaces, empty root,
  // cgroup v1 memory + pids" or "no namespaces (process group and rlimits only), memfd
  // refused".
  std::string isolation() const;
  const SandboxOptions& options() const { return options_; }

  // How the program is isolated; chosen by create().
  struct Mode {
    bool user_namespace = false;  // a user namespace (uid 0 inside maps to the sandbox uid)
    bool namespaces = false;      // pid + mount + ipc + uts + cgroup namespaces, empty root
    bool network_namespace = false;
  };
  // Where runs get their cgroups: directories this process may make children in.
  struct Cgroups {
    int version = 0;     // 0: none (memfd and shm refused instead), 1 or 2
    std::string memory;  // v2: the one directory (memory and pids)
    std::string pids;    // v1 only; empty: RLIMIT_NPROC alone
  };

 private:
  Sandbox(const SandboxOptions& options, Mode mode, Cgroups cgroups)
      : options_(options), mode_(mode), cgroups_(std::move(cgroups)) {}
  absl::StatusOr<SandboxResult> run_in_mode(const SandboxRequest& request, Mode mode,
                                            bool probe) const;

  SandboxOptions options_;
  Mode mode_;
  Cgroups cgroups_;
};

}  // namespace flywheel::rewards
