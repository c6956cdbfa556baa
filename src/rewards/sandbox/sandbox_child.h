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
  kStageMountReadOnly,
  kStageMountTmp,
  kStageMountShm,
  kStageMountRun,
  kStageWorkdir,
  kStageWriteFiles,
  kStageFork,
  kStageRlimits,
  kStageDropPrivileges,
  kStageExec,
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

  const char* workdir = nullptr;     // absolute, "/tmp/flywheel-sbx-XXXXXX"
  const char* tmpfs_data = nullptr;  // mount data of the private /tmp
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

// The body of the cloned child: arranges descriptors, waits for the parent, sets up the
// namespaces, starts the program, reaps, reports its status and output files, exits.
[[noreturn]] void run_sandbox_init(const ChildPlan& plan);

}  // namespace flywheel::rewards::sandbox_internal
