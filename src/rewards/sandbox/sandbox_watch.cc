#include "sandbox/sandbox_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sandbox/sandbox_cgroups.h"
#include "sandbox/sandbox_child.h"

namespace flywheel::rewards::sandbox_internal {
namespace {

constexpr size_t kReadChunk = 64 << 10;

// Reads what is available from `fd` into `out` (up to `cap` bytes; the rest is discarded).
// Returns false at end of file or on an error other than EAGAIN / EINTR.
bool drain(int fd, std::string* out, int64_t cap, bool* overflow) {
  char buffer[kReadChunk];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false;
    int64_t room = cap - static_cast<int64_t>(out->size());
    if (room > 0) out->append(buffer, static_cast<size_t>(std::min<int64_t>(room, n)));
    if (n > room) *overflow = true;
    if (static_cast<size_t>(n) < sizeof buffer) return true;  // pipe emptied: back to poll
  }
}

}  // namespace

Report parse_report(const std::string& bytes, const SandboxRequest& request) {
  Report out;
  size_t pos = 0;
  while (pos + sizeof(RecordHeader) <= bytes.size()) {
    RecordHeader header;
    std::memcpy(&header, bytes.data() + pos, sizeof header);
    pos += sizeof header;
    if (header.length > bytes.size() - pos) break;  // cut off by the cap
    switch (header.type) {
      case sandbox_internal::kSetupError:
        if (out.setup_error.empty()) {
          out.setup_error = absl::StrCat(sandbox_internal::setup_stage_name(header.arg), ": ",
                                         errno_text(static_cast<int>(header.value)));
        }
        break;
      case sandbox_internal::kProgramStatus:
        out.has_status = true;
        out.status = static_cast<int>(header.value);
        break;
      case sandbox_internal::kOutputFile:
        if (header.arg < request.output_files.size()) {
          out.files[request.output_files[header.arg]] = bytes.substr(pos, header.length);
        }
        break;
      default:
        break;
    }
    pos += header.length;
  }
  return out;
}

absl::Status conclude(Report report, const RunEnd& end, const std::string& isolation,
                      const std::string& program, SandboxResult* result) {
  const int init_status = end.init_status;
  if (!report.setup_error.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox (", isolation, "): ", report.setup_error, program));
  }
  if (report.has_status) {
    if (WIFEXITED(report.status)) result->exit_code = WEXITSTATUS(report.status);
    if (WIFSIGNALED(report.status)) result->signal = WTERMSIG(report.status);
  } else if (end.killed || WIFSIGNALED(init_status)) {
    result->signal = SIGKILL;  // killed before the program ended (timeout, stdout cap, or by it)
  } else {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox (", isolation, "): the sandbox init exited with status ",
        WIFEXITED(init_status) ? WEXITSTATUS(init_status) : -1, " before the program ended"));
  }
  result->output_files = std::move(report.files);
  return absl::OkStatus();
}

absl::StatusOr<RunEnd> watch(const WatchedRun& run, SandboxResult* result,
                             std::string* report_bytes) {
  const pid_t pid = static_cast<pid_t>(run.pid);
  RunEnd end;
  bool reaped = false;
  bool report_overflow = false;
  auto kill_all = [&] {
    if (!run.namespaces) kill(-pid, SIGKILL);  // its process group
    // With namespaces, SIGTERM makes the launcher kill pid 1 of the namespace (the kernel ends
    // the rest) and exit once all of it is gone. Without, the launcher is the init itself.
    kill(pid, run.namespaces ? SIGTERM : SIGKILL);
  };
  for (UniqueFd* fd : {run.out, run.err, run.report}) fcntl(fd->get(), F_SETFL, O_NONBLOCK);
  for (;;) {
    pollfd fds[4] = {{run.out->get(), POLLIN, 0},
                     {run.err->get(), POLLIN, 0},
                     {run.report->get(), POLLIN, 0},
                     {run.pidfd->get(), POLLIN, 0}};
    int timeout_ms = -1;
    if (!end.killed) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(run.deadline - Clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
    }
    if (run.pidfd->get() < 0) timeout_ms = timeout_ms < 0 ? 5 : std::min(timeout_ms, 5);
    int ready = poll(fds, 4, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      const absl::Status failed = os_error("poll");
      kill_all();
      if (!reaped) waitpid(pid, nullptr, 0);
      return failed;
    }
    bool exited = false;
    if (run.pidfd->get() >= 0) {
      exited = fds[3].revents != 0;
    } else if (waitpid(pid, &end.init_status, WNOHANG) == pid) {
      exited = reaped = true;
    }
    for (int i = 0; i < 3 && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      UniqueFd& fd = i == 0 ? *run.out : i == 1 ? *run.err : *run.report;
      std::string& buffer = i == 0   ? result->stdout_data
                            : i == 1 ? result->stderr_data
                                     : *report_bytes;
      const int64_t cap = i == 0 ? run.stdout_cap : i == 1 ? run.stderr_cap : run.report_cap;
      bool& overflow = i == 0   ? result->stdout_truncated
                       : i == 1 ? result->stderr_truncated
                                : report_overflow;
      if (!drain(fd.get(), &buffer, cap, &overflow)) fd.reset();
    }
    if (exited) break;
    if (!end.killed && result->stdout_truncated && run.kill_on_stdout_overflow) {
      kill_all();
      end.killed = true;
    }
    if (!end.killed && Clock::now() >= run.deadline) {
      kill_all();
      end.killed = true;
      result->timed_out = true;
    }
  }
  // Without namespaces, a program that left a child in its group would keep the pipes open.
  if (!run.namespaces) kill(-pid, SIGKILL);
  if (!reaped && waitpid(pid, &end.init_status, 0) < 0 && errno != ECHILD) {
    return os_error("waitpid");
  }
  result->elapsed_s = std::chrono::duration<double>(Clock::now() - run.start).count();
  // Everything that could write is gone (with namespaces); take what is left in the pipes.
  drain(run.out->get(), &result->stdout_data, run.stdout_cap, &result->stdout_truncated);
  drain(run.err->get(), &result->stderr_data, run.stderr_cap, &result->stderr_truncated);
  drain(run.report->get(), report_bytes, run.report_cap, &report_overflow);
  return end;
}

}  // namespace flywheel::rewards::sandbox_internal
