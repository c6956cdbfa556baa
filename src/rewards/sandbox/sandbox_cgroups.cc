#include "sandbox/sandbox_cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flywheel::rewards::sandbox_internal {
namespace {

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

bool write_text(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write_all(fd, text.data(), text.size());
  close(fd);
  return ok;
}

// True when `dir` takes a child cgroup (made and removed again).
bool can_make_child(const std::string& dir) {
  const std::string probe = absl::StrCat(dir, "/flywheel-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0) return false;
  rmdir(probe.c_str());
  return true;
}

}  // namespace

Sandbox::Cgroups find_cgroups() {
  Sandbox::Cgroups out;
  std::string self;
  if (!read_text("/proc/self/cgroup", &self)) return out;
  std::string v2_path, memory_path, pids_path;
  for (absl::string_view line : absl::StrSplit(self, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) v2_path = f[2];
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "memory") memory_path = f[2];
      if (c == "pids") pids_path = f[2];
    }
  }
  // v2, unified or hybrid: both controllers enabled for this cgroup's children.
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    std::string controllers;
    const std::string dir = absl::StrCat(mount, v2_path == "/" ? "" : v2_path);
    if (!v2_path.empty() && read_text(dir + "/cgroup.subtree_control", &controllers) &&
        absl::StrContains(controllers, "memory") && absl::StrContains(controllers, "pids") &&
        can_make_child(dir)) {
      out.version = 2;
      out.memory = dir;
      return out;
    }
  }
  // v1: a memory hierarchy (and a pids one when there is).
  if (!memory_path.empty()) {
    const std::string memory =
        absl::StrCat("/sys/fs/cgroup/memory", memory_path == "/" ? "" : memory_path);
    if (access((memory + "/memory.limit_in_bytes").c_str(), F_OK) == 0 && can_make_child(memory)) {
      out.version = 1;
      out.memory = memory;
      const std::string pids =
          absl::StrCat("/sys/fs/cgroup/pids", pids_path == "/" ? "" : pids_path);
      if (!pids_path.empty() && can_make_child(pids)) out.pids = pids;
    }
  }
  return out;
}

RunCgroups::RunCgroups(const Sandbox::Cgroups& roots, const std::string& name) : roots_(roots) {
  if (roots.version == 0) return;
  memory_ = absl::StrCat(roots.memory, "/", name);
  if (!roots.pids.empty()) pids_ = absl::StrCat(roots.pids, "/", name);
}
absl::Status RunCgroups::make(int64_t memory_bytes, int max_processes) {
  if (memory_.empty()) return absl::OkStatus();
  for (const std::string* dir : {&memory_, &pids_}) {
    if (!dir->empty() && mkdir(dir->c_str(), 0755) != 0) {
      return os_error(absl::StrCat("making the run's cgroup ", *dir));
    }
  }
  const std::string memory = std::to_string(memory_bytes);
  const std::string pids = std::to_string(max_processes);
  bool ok;
  if (roots_.version == 2) {
    ok = write_text(memory_ + "/memory.max", memory) && write_text(memory_ + "/pids.max", pids);
    write_text(memory_ + "/memory.swap.max", "0");  // absent without swap accounting
  } else {
    ok = write_text(memory_ + "/memory.limit_in_bytes", memory);
    write_text(memory_ + "/memory.memsw.limit_in_bytes", memory);  // with swap accounting
    if (ok && !pids_.empty()) ok = write_text(pids_ + "/pids.max", pids);
  }
  if (!ok) return os_error(absl::StrCat("setting the limits of the run's cgroup ", memory_));
  return absl::OkStatus();
}

std::vector<std::string> RunCgroups::procs() const {
  std::vector<std::string> out;
  for (const std::string* dir : {&memory_, &pids_}) {
    if (!dir->empty()) out.push_back(*dir + "/cgroup.procs");
  }
  return out;
}

void RunCgroups::read_stats(SandboxResult* result) const {
  if (memory_.empty()) return;
  std::string text;
  if (read_text(memory_ + (roots_.version == 2 ? "/memory.peak" : "/memory.max_usage_in_bytes"),
                &text)) {
    int64_t peak = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &peak)) result->memory_peak_bytes = peak;
  }
  if (read_text(memory_ + (roots_.version == 2 ? "/memory.events" : "/memory.oom_control"),
                &text)) {
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      int64_t n = 0;
      if (absl::ConsumePrefix(&line, "oom_kill ") && absl::SimpleAtoi(line, &n) && n > 0) {
        result->oom_killed = true;
      }
    }
  }
}

void RunCgroups::remove() {
  for (std::string* dir : {&memory_, &pids_}) {
    // The last tasks may still be on their way out: a few tries, 1 ms apart.
    for (int i = 0; !dir->empty() && i < 200; ++i) {
      if (rmdir(dir->c_str()) == 0 || errno == ENOENT) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    dir->clear();
  }
}

}  // namespace flywheel::rewards::sandbox_internal
