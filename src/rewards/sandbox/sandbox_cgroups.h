// The sandbox's cgroups (private to the sandbox): where this process may make per-run cgroups,
// and one run's memory + pids cgroups, made with their limits before the run and read and
// removed after it. Also the small OS helpers the sandbox's files share.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sandbox/sandbox.h"

namespace flywheel::rewards::sandbox_internal {

// strerror_r's text for `error`.
std::string errno_text(int error);
// Internal "sandbox: <what>: <errno text>".
absl::Status os_error(absl::string_view what, int error = errno);
// Writes all of `data` to `fd` (retrying on EINTR); false on an error.
bool write_all(int fd, const char* data, size_t size);

// The cgroups this process may make per-run children in (its own cgroup's directories): v2 with
// memory and pids delegated, else v1 memory (and pids); version 0 when neither.
Sandbox::Cgroups find_cgroups();

// One run's cgroups, named `name` under `roots` (nothing when roots.version is 0).
class RunCgroups {
 public:
  RunCgroups(const Sandbox::Cgroups& roots, const std::string& name);
  ~RunCgroups() { remove(); }

  // Makes the directories and sets the limits; Internal naming the directory on failure.
  absl::Status make(int64_t memory_bytes, int max_processes);
  // The cgroup.procs files the run's init joins.
  std::vector<std::string> procs() const;
  // The memory peak and whether the kernel killed a process for memory.
  void read_stats(SandboxResult* result) const;
  // Removes the directories (a few tries while the last tasks leave).
  void remove();

 private:
  const Sandbox::Cgroups& roots_;
  std::string memory_, pids_;
};

}  // namespace flywheel::rewards::sandbox_internal
