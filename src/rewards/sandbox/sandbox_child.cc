#include "sandbox/sandbox_child.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

// Older headers lack these (Linux 5.9 / 5.12).
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

namespace flywheel::rewards::sandbox_internal {
namespace {

// Where init puts its descriptors (the program gets 0-2; 3 is close-on-exec).
constexpr int kReportFd = 3;
constexpr int kSyncFd = 4;
constexpr int kFirstFreeFd = 5;
constexpr int kSetupFailedExit = 127;

// struct mount_attr of <linux/mount.h>, which clashes with <sys/mount.h> on some glibc versions.
struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};
constexpr uint64_t kMountAttrReadOnly = 0x1;
constexpr uint64_t kMountAttrNoSuid = 0x2;

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void report(uint32_t type, uint32_t arg, int64_t value, uint64_t length = 0) {
  RecordHeader header{type, arg, value, length};
  write_all(kReportFd, &header, sizeof header);
}

[[noreturn]] void fail(SetupStage stage) {
  report(kSetupError, stage, errno);
  _exit(kSetupFailedExit);
}

void close_from(int first) {
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
  struct rlimit limit = {};
  rlim_t last = 4096;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (rlim_t{1} << 20)) {
    last = limit.rlim_cur;
  }
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd) close(static_cast<int>(fd));
}

}  // namespace

void reset_signals() {
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &action, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

namespace {

// Moves the parent's descriptors to 0-4 and closes every other one (other threads of the
// parent may have opened descriptors without O_CLOEXEC).
void arrange_descriptors(const ChildPlan& plan) {
  const int from[] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd, plan.report_fd, plan.sync_fd};
  int moved[5];
  for (int i = 0; i < 5; ++i) {
    moved[i] = fcntl(from[i], F_DUPFD_CLOEXEC, 16);
    if (moved[i] < 0) _exit(kSetupFailedExit);
  }
  for (int i = 0; i < 3; ++i) {
    if (dup2(moved[i], i) < 0) _exit(kSetupFailedExit);
  }
  if (dup3(moved[3], kReportFd, O_CLOEXEC) < 0 || dup3(moved[4], kSyncFd, O_CLOEXEC) < 0) {
    _exit(kSetupFailedExit);
  }
  close_from(kFirstFreeFd);
}

void setup_mounts(const ChildPlan& plan) {
  // Nothing done here may propagate back to the host.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(kStageMountPrivate);
  MountAttr attr = {kMountAttrReadOnly | kMountAttrNoSuid, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) != 0) {
    fail(kStageMountReadOnly);
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_data) != 0) {
    fail(kStageMountTmp);
  }
  if (mkdir("/tmp/.shm", 01777) != 0 || chmod("/tmp/.shm", 01777) != 0) fail(kStageMountShm);
  if (mount("/tmp/.shm", "/dev/shm", nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) {
    fail(kStageMountShm);
  }
  // Host unix sockets (/run/..., /dev/log -> /run/systemd/...) stay out of reach.
  if (mount("tmpfs", "/run", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=4k,nr_inodes=16,mode=0755") != 0 &&
      errno != ENOENT) {
    fail(kStageMountRun);
  }
  // A /proc of the new PID namespace hides the host's processes. Best effort: a kernel may
  // refuse it (the host /proc partly covered), and the host's pids are unreachable anyway.
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  if (mkdir(plan.workdir, 0700) != 0) fail(kStageWorkdir);
}

void write_files(const ChildPlan& plan) {
  umask(0);
  for (size_t i = 0; i < plan.num_files; ++i) {
    const PlannedFile& file = plan.files[i];
    int fd = open(file.name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file.mode);
    if (fd < 0) fail(kStageWriteFiles);
    if (!write_all(fd, file.data, file.size)) fail(kStageWriteFiles);
    close(fd);
  }
  umask(022);
}

[[noreturn]] void run_program(const ChildPlan& plan) {
  for (int i = 0; i < ChildPlan::kNumLimits; ++i) {
    if (setrlimit(plan.limit_resources[i], &plan.limits[i]) != 0) fail(kStageRlimits);
  }
  // Drop every capability for good: ambient, bounding set (may fail without CAP_SETPCAP, when
  // there is nothing to drop), securebits so that uid 0 regains nothing at execve().
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL) break;
  }
  prctl(PR_SET_SECUREBITS,
        SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
            SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
        0, 0, 0);
  // Raw set*id calls: glibc's wrappers signal every thread glibc believes exists (the caller's),
  // which is not safe in a clone of a multi-threaded process.
  if (plan.drop_to_uid) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0 ||
        syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0 ||
        syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
      fail(kStageDropPrivileges);
    }
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) fail(kStageDropPrivileges);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(kStageDropPrivileges);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (plan.probe) _exit(0);
  execve(plan.exec_path, plan.argv, plan.envp);
  fail(kStageExec);
}

int program_main(void* plan) { run_program(*static_cast<const ChildPlan*>(plan)); }

void send_output_files(const ChildPlan& plan) {
  char buffer[16384];
  for (size_t i = 0; i < plan.num_output_files; ++i) {
    const uint32_t index = static_cast<uint32_t>(i);
    // O_NOFOLLOW: the program may have replaced the file by a link to a host file, which init
    // (root of the sandbox, or real root without a user namespace) could read.
    int fd = open(plan.output_files[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      report(kOutputFileMissing, index, errno);
      continue;
    }
    struct stat st = {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > plan.max_output_file_bytes) {
      report(kOutputFileMissing, index, S_ISREG(st.st_mode) ? EFBIG : EINVAL);
      close(fd);
      continue;
    }
    uint64_t left = static_cast<uint64_t>(st.st_size);
    report(kOutputFile, index, 0, left);
    while (left > 0) {
      size_t want = left < sizeof buffer ? left : sizeof buffer;
      ssize_t n = read(fd, buffer, want);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // shrunk under us: pad, the header promised `left` more bytes
        for (size_t j = 0; j < want; ++j) buffer[j] = 0;
        n = static_cast<ssize_t>(want);
      }
      if (!write_all(kReportFd, buffer, static_cast<size_t>(n))) _exit(kSetupFailedExit);
      left -= static_cast<uint64_t>(n);
    }
    close(fd);
  }
}

}  // namespace

const char* setup_stage_name(uint32_t stage) {
  switch (stage) {
    case kStageSync:
      return "waiting for the parent";
    case kStageUserIds:
      return "switching to the user namespace's uid";
    case kStageMountPrivate:
      return "making the mounts private";
    case kStageMountReadOnly:
      return "making the filesystem read-only (mount_setattr)";
    case kStageMountTmp:
      return "mounting the private /tmp";
    case kStageMountShm:
      return "binding /dev/shm";
    case kStageMountRun:
      return "covering /run";
    case kStageWorkdir:
      return "creating the working directory";
    case kStageWriteFiles:
      return "writing the input files";
    case kStageFork:
      return "starting the program";
    case kStageRlimits:
      return "setting rlimits";
    case kStageDropPrivileges:
      return "dropping privileges";
    case kStageExec:
      return "executing the program";
    case kStageLauncher:
      return "reading the launcher's plan";
    case kStageClone:
      return "creating the namespaces (clone)";
    case kStageIdMaps:
      return "writing the uid / gid maps";
    default:
      return "setting up";
  }
}

void run_sandbox_init(const ChildPlan& plan) {
  arrange_descriptors(plan);
  reset_signals();
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  char byte = 0;
  ssize_t n;
  do {
    n = read(kSyncFd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) _exit(kSetupFailedExit);  // the parent gave up
  close(kSyncFd);
  setsid();
  if (plan.user_namespace) {
    if (syscall(SYS_setresgid, 0, 0, 0) != 0 ||
        (plan.allow_setgroups && syscall(SYS_setgroups, 0, nullptr) != 0) ||
        syscall(SYS_setresuid, 0, 0, 0) != 0) {
      fail(kStageUserIds);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // a change of credentials cleared it
  }
  if (plan.namespaces) setup_mounts(plan);
  if (plan.namespaces && plan.drop_to_uid && chown(plan.workdir, plan.uid, plan.gid) != 0) {
    fail(kStageWorkdir);
  }
  if (chdir(plan.workdir) != 0) fail(kStageWorkdir);
  write_files(plan);

  // vfork semantics: the program shares this address space (a copy of the caller's, possibly
  // large) until execve() instead of copying its page tables again; init waits meanwhile.
  alignas(16) char program_stack[64 << 10];
  long program = clone(program_main, program_stack + sizeof program_stack,
                       CLONE_VM | CLONE_VFORK | SIGCHLD, const_cast<ChildPlan*>(&plan));
  if (program < 0) fail(kStageFork);
  close(0);
  close(1);
  close(2);
  int status = 0;
  for (;;) {
    int st = 0;
    long pid = waitpid(-1, &st, __WALL);
    if (pid == program) {
      status = st;
      break;
    }
    if (pid < 0 && errno != EINTR) break;  // ECHILD: cannot happen while `program` lives
  }
  if (plan.namespaces) {
    // pid 1 of the namespace: end whatever the program left (daemons, stray children) now, so
    // that the output files are stable and the parent finds nothing left behind.
    kill(-1, SIGKILL);
    while (waitpid(-1, nullptr, __WALL) > 0 || errno == EINTR) {
    }
  }
  report(kProgramStatus, 0, status);
  send_output_files(plan);
  _exit(0);
}

}  // namespace flywheel::rewards::sandbox_internal
