// The plan of one sandbox run (sandbox_child.h): the LaunchHeader, then its items, that the
// launcher reads from a memfd and carries out (namespaces, the empty root, limits, files).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sandbox/sandbox.h"

namespace flywheel::rewards {

struct LaunchPlanInput {
  const SandboxRequest& request;
  const SandboxOptions& options;
  Sandbox::Mode mode;
  bool probe = false;  // create()'s check of a mode, not a user's program
  bool root = false;   // this process runs as root
  std::string workdir;
  std::vector<std::string> cgroup_procs;  // the run's cgroup.procs files
  bool deny_memfd = false;                // no cgroups: refuse memfd and shm instead
};

// The plan's bytes.
std::string launch_plan(const LaunchPlanInput& in);

// The host paths bound into the empty root ("D/usr", "F/etc/ld.so.cache") and the links made in
// it as on the host (merged /usr: /bin -> usr/bin).
struct RootEntries {
  std::vector<std::string> binds;
  std::vector<std::pair<std::string, std::string>> links;
};
RootEntries root_entries(const SandboxOptions& options);

}  // namespace flywheel::rewards
