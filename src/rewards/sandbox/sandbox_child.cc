#include "sandbox/sandbox_child.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
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
#include <cstddef>
#include <initializer_list>

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

// Async-signal-safe string building into a fixed buffer; false when it does not fit.
bool join_path(char* out, size_t size, const char* a, const char* b) {
  size_t n = 0;
  for (const char* s : {a, b}) {
    for (; *s != '\0'; ++s) {
      if (n + 1 >= size) return false;
      out[n++] = *s;
    }
  }
  out[n] = '\0';
  return true;
}

// mkdir -p of `root` + `path` (path absolute; `root` exists), every component 0755.
bool make_dirs(const char* root, const char* path) {
  char full[4096];
  if (!join_path(full, sizeof full, root, path)) return false;
  size_t i = 0;
  while (root[i] != '\0') ++i;
  for (++i;; ++i) {
    if (full[i] != '/' && full[i] != '\0') continue;
    const char saved = full[i];
    full[i] = '\0';
    if (mkdir(full, 0755) != 0 && errno != EEXIST) return false;
    full[i] = saved;
    if (saved == '\0') return true;
  }
}

// An empty file at root + path to bind a host file over.
bool make_file(const char* root, const char* path) {
  char full[4096];
  if (!join_path(full, sizeof full, root, path)) return false;
  int fd = open(full, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno == EEXIST;
  close(fd);
  return true;
}

// Binds host `path` at root + path, read-only and nosuid (recursively).
bool bind_read_only(const char* root, const char* path, bool directory) {
  char target[4096];
  if (!join_path(target, sizeof target, root, path)) return false;
  if (directory) {
    if (!make_dirs(root, path)) return false;
  } else {
    char parent[4096];
    if (!join_path(parent, sizeof parent, path, "")) return false;
    size_t cut = 0;
    for (size_t i = 0; parent[i] != '\0'; ++i) {
      if (parent[i] == '/') cut = i;
    }
    parent[cut] = '\0';
    if ((cut > 0 && !make_dirs(root, parent)) || !make_file(root, path)) return false;
  }
  if (mount(path, target, nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
  MountAttr attr = {kMountAttrReadOnly | kMountAttrNoSuid, 0, 0, 0};
  return syscall(SYS_mount_setattr, AT_FDCWD, target, AT_RECURSIVE, &attr, sizeof attr) == 0;
}

bool write_text(const char* root, const char* path, const char* text) {
  char full[4096];
  if (!join_path(full, sizeof full, root, path)) return false;
  int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t size = 0;
  while (text[size] != '\0') ++size;
  const bool ok = write_all(fd, text, size);
  close(fd);
  return ok;
}

// The device nodes programs expect; each bound from the host's /dev.
constexpr const char* kDevices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                    "/dev/urandom"};

// An empty root for the program (DESIGN.md §7): a tmpfs of tmpfs_bytes on the host workdir
// holding /tmp (the workdir), /dev (a few devices, shm), a fresh /proc, a minimal /etc, and only
// the host paths of the plan bound read-only (the interpreter's and its libraries'). Nothing
// else of the host (the dataset, the run directory, tokens, keys) exists in it.
void setup_mounts(const ChildPlan& plan) {
  // Nothing done here may propagate back to the host.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(kStageMountPrivate);
  const char* root = plan.workdir;
  if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_data) != 0) {
    fail(kStageMountRoot);
  }
  for (const char* dir : {"/dev", "/proc", "/etc"}) {
    if (!make_dirs(root, dir)) fail(kStageMountRoot);
  }
  char path[4096];
  for (const char* dir : {"/tmp", "/dev/shm"}) {
    if (!make_dirs(root, dir) || !join_path(path, sizeof path, root, dir) ||
        chmod(path, 01777) != 0) {
      fail(kStageMountRoot);
    }
  }
  if (!write_text(root, "/etc/passwd",
                  "root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n") ||
      !write_text(root, "/etc/group", "root:x:0:\nnogroup:x:65534:\n")) {
    fail(kStageMountRoot);
  }
  for (size_t i = 0; i < plan.num_links; ++i) {
    if (!join_path(path, sizeof path, root, plan.link_paths[i]) ||
        symlink(plan.link_targets[i], path) != 0) {
      fail(kStageMountRoot);
    }
  }
  for (const char* link : {"/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"}) {
    const char* target = link[5] == 'f'   ? "/proc/self/fd"
                         : link[8] == 'i' ? "/proc/self/fd/0"
                         : link[8] == 'o' ? "/proc/self/fd/1"
                                          : "/proc/self/fd/2";
    if (!join_path(path, sizeof path, root, link) || symlink(target, path) != 0) {
      fail(kStageMountRoot);
    }
  }
  for (size_t i = 0; i < plan.num_binds; ++i) {
    if (!bind_read_only(root, plan.binds[i] + 1, plan.binds[i][0] == 'D')) fail(kStageBind);
  }
  for (const char* device : kDevices) {
    if (!make_file(root, device) || !join_path(path, sizeof path, root, device) ||
        mount(device, path, nullptr, MS_BIND, nullptr) != 0) {
      fail(kStageBind);
    }
  }
  // The PID namespace's own /proc: the host's processes stay out of sight. A kernel that
  // refuses it (a /proc partly covered, as in some containers) refuses the sandbox.
  if (!join_path(path, sizeof path, root, "/proc") ||
      mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    fail(kStageMountProc);
  }
  if (!join_path(path, sizeof path, root, plan.workdir) || mkdir(path, 0700) != 0) {
    fail(kStageWorkdir);
  }
  // The tmpfs becomes "/"; the host's tree is detached and gone from this namespace.
  if (chdir(root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0) {
    fail(kStagePivot);
  }
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

// Makes memfd_create and SysV shmget fail with EPERM (their pages count against no rlimit, and
// without a memory cgroup nothing else bounds them); syscalls of another ABI fail with ENOSYS.
// False where this build knows no seccomp architecture.
bool deny_memfd_and_shm() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
  static struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 3, 0),  // x32: same arch, other numbers
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_shmget, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  static struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) == 0;
#endif
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
  if (plan.deny_memfd && !deny_memfd_and_shm()) fail(kStageSeccomp);
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
    case kStageMountRoot:
      return "making the empty root (tmpfs)";
    case kStageBind:
      return "binding a host path into the root read-only (mount_setattr)";
    case kStageMountProc:
      return "mounting the sandbox's /proc";
    case kStagePivot:
      return "switching to the new root (pivot_root)";
    case kStageCgroup:
      return "moving the run into its cgroups";
    case kStageSeccomp:
      return "installing the seccomp filter";
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
