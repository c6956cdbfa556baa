// The child side of Sandbox::run(): the init process of a sandbox and the program it starts.
//
// These run between clone() and execve() in a copy of a multi-threaded process, so they make
// only async-signal-safe calls (raw system calls; no allocation, no locks, no stdio). Everything
// they need is prepared by the parent in a ChildPlan before clone().
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace flywheel::rewards::sandbox_internal {

// Records the init writes to the report pipe: a header, then `length` payload bytes.
enum RecordType : uint32_t {
  kSetupError = 1,         // arg = SetupStage, length = 0, value = errno
  kProgramStatus = 2,      // value = the program's wait status
  kOutputFile = 3,         // arg = index into output_files, length = size, then the bytes
  kOutputFileMissing = 4,  // arg = index, value = errno (EFBIG: over the size limit)
};

struct RecordHeader {
  uint32_t type;
  uint32_t arg;
  int64_t value;
  uint64_t length;
};

enum SetupStage : uint32_t {
  kStageSync = 1,
  kStageUserIds,
  kStageMountPrivate,
  kStageWorkdir,
  kStageWriteFiles,
  kStageFork,
  kStageRlimits,
  kStageDropPrivileges,
  kStageExec,
  kStageLauncher,   // the launcher could not read its plan
  kStageClone,      // the launcher's clone() with the namespace flags
  kStageIdMaps,     // the launcher writing the init's uid_map / gid_map
  kStageMountRoot,  // the empty root's tmpfs and its directories
  kStageBind,       // binding a host path (interpreter, libraries, devices) into the root
  kStageMountProc,  // the sandbox's own /proc
  kStagePivot,      // switching to the new root
  kStageCgroup,     // the launcher moving the init into the run's cgroups
  kStageSeccomp,    // refusing memfd_create and SysV shm (no cgroup to count them)
};

// "making the filesystem read-only" style text for errors.
const char* setup_stage_name(uint32_t stage);

struct PlannedFile {
  const char* name;
  const char* data;
  size_t size;
  unsigned int mode;
};

struct ChildPlan {
  // Isolation.
  bool user_namespace = false;
  bool namespaces = false;       // mount setup below applies
  bool allow_setgroups = false;  // root parent with a user namespace: drop supplementary groups
  bool drop_to_uid = false;      // program switches to uid/gid (root without a user namespace)
  uid_t uid = 65534;
  gid_t gid = 65534;
  bool probe = false;  // the program exits 0 right before execve()

  // Descriptors as numbered in the parent.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;
  int sync_fd = -1;  // init waits for one byte on it (the parent wrote the id maps)

  // Absolute, "/tmp/flywheel-sbx-XXXXXX": with namespaces, the host directory the run's empty
  // root (a tmpfs) is mounted on, and the working directory of the same name inside it.
  const char* workdir = nullptr;
  const char* tmpfs_data = nullptr;  // mount data of the root tmpfs
  // Host paths bound read-only into the root: "D/usr" (a directory) or "F/etc/ld.so.cache"
  // (a file), and symbolic links made in it as on the host (link_paths[i] -> link_targets[i]).
  const char* const* binds = nullptr;
  size_t num_binds = 0;
  const char* const* link_paths = nullptr;
  const char* const* link_targets = nullptr;
  size_t num_links = 0;
  bool deny_memfd = false;  // seccomp: memfd_create and shmget fail with EPERM
  const PlannedFile* files = nullptr;
  size_t num_files = 0;
  const char* const* output_files = nullptr;
  size_t num_output_files = 0;
  int64_t max_output_file_bytes = 0;

  static constexpr int kNumLimits = 6;
  int limit_resources[kNumLimits] = {};
  struct rlimit limits[kNumLimits] = {};

  const char* exec_path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

// How Sandbox::run() hands a plan to the launcher executable (flywheel_sandbox_init), which it
// starts with a vfork-style clone + execve (no copy of the caller's page tables). The launcher
// gets stdin, stdout, stderr and the report pipe as 0-3 and the plan as a memfd on 4: a
// LaunchHeader, then strings, each a uint64_t length, the bytes and a NUL: workdir, tmpfs_data,
// num_args arguments, num_env environment entries, num_files x (name, mode as a 4-byte string
// of the uint32_t, contents), num_outputs output file names, num_binds binds, num_links x
// (path, target), num_cgroups cgroup.procs paths. The launcher is a fresh
// single-threaded process: it needs no async-signal-safe discipline before its own clone().
constexpr char kLauncherName[] = "flywheel_sandbox_init";
constexpr int kLauncherPlanFd = 4;
constexpr uint32_t kLaunchMagic = 0x46574c31;  // "FWL1"

struct LaunchHeader {
  uint32_t magic = kLaunchMagic;
  uint32_t size = sizeof(LaunchHeader);
  uint64_t clone_flags = 0;  // namespace flags for the init; unused without namespaces
  uint8_t user_namespace = 0;
  uint8_t namespaces = 0;
  uint8_t allow_setgroups = 0;
  uint8_t drop_to_uid = 0;
  uint8_t probe = 0;
  uint8_t deny_setgroups = 0;  // write "deny" to the init's setgroups before the maps
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t map_uid = 0;  // uid_map "0 <map_uid> 1" (with a user namespace)
  uint32_t map_gid = 0;
  int64_t max_output_file_bytes = 0;
  int32_t limit_resources[ChildPlan::kNumLimits] = {};
  uint64_t limit_cur[ChildPlan::kNumLimits] = {};
  uint64_t limit_max[ChildPlan::kNumLimits] = {};
  uint64_t num_args = 0;
  uint64_t num_env = 0;
  uint64_t num_files = 0;
  uint64_t num_outputs = 0;
  uint64_t num_binds = 0;    // then num_binds strings ("D/path" or "F/path")
  uint64_t num_links = 0;    // then num_links x (path, target)
  uint64_t num_cgroups = 0;  // then num_cgroups cgroup.procs paths the init is moved into
  uint8_t deny_memfd = 0;
};

// Every signal back to its default action and unblocked: the caller may ignore or block signals
// (SIGPIPE, SIGCHLD), which survive execve(); neither must reach the program (an ignored SIGCHLD
// would also reap the init before waitpid() sees it). Async-signal-safe.
void reset_signals();

// The body of the cloned child: arranges descriptors, waits for the parent, sets up the
// namespaces, starts the program, reaps, reports its status and output files, exits.
[[noreturn]] void run_sandbox_init(const ChildPlan& plan);

}  // namespace flywheel::rewards::sandbox_internal
