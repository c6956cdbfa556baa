#include "sandbox/launch_plan.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sandbox/sandbox_child.h"

namespace flywheel::rewards {
namespace {

using sandbox_internal::ChildPlan;
using sandbox_internal::LaunchHeader;

void append_item(std::string* out, const char* data, size_t size) {
  const uint64_t n = size;
  out->append(reinterpret_cast<const char*>(&n), sizeof n);
  out->append(data, size);
  out->push_back('\0');
}
void append_item(std::string* out, const std::string& s) { append_item(out, s.data(), s.size()); }

}  // namespace

RootEntries root_entries(const SandboxOptions& options) {
  RootEntries out;
  std::vector<std::string> paths = {"/usr",   "/bin",   "/sbin",   "/lib",
                                    "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache"};
  paths.insert(paths.end(), options.read_only_paths.begin(), options.read_only_paths.end());
  for (const std::string& path : paths) {
    struct stat st = {};
    if (lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
      if (n > 0) out.links.emplace_back(path, std::string(target, static_cast<size_t>(n)));
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      out.binds.push_back(absl::StrCat(S_ISDIR(st.st_mode) ? "D" : "F", path));
    }
  }
  return out;
}

std::string launch_plan(const LaunchPlanInput& in) {
  const SandboxRequest& request = in.request;
  const SandboxOptions& options = in.options;
  const Sandbox::Mode& mode = in.mode;
  const bool root = in.root;
  const bool probe = in.probe;
  const std::string& workdir = in.workdir;
  const std::vector<std::string>& cgroup_procs = in.cgroup_procs;
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + workdir, "LANG=C.UTF-8"};
  const std::string tmpfs_data =
      absl::StrCat("size=", options.tmpfs_bytes, ",nr_inodes=4096,mode=0755");
  const RootEntries entries = mode.namespaces ? root_entries(options) : RootEntries{};
  const double cpu_s = options.cpu_s == SandboxOptions::kAuto
                           ? std::ceil(options.wall_timeout_s) + 1
                           : options.cpu_s;
  const rlim_t cpu = static_cast<rlim_t>(std::ceil(cpu_s));

  LaunchHeader header;
  header.user_namespace = mode.user_namespace;
  header.namespaces = mode.namespaces;
  header.allow_setgroups = mode.user_namespace && root;
  header.drop_to_uid = root && !mode.user_namespace;
  header.uid = options.unprivileged_uid;
  header.gid = options.unprivileged_gid;
  header.probe = probe;
  header.deny_setgroups = mode.user_namespace && !root;
  header.map_uid = root ? options.unprivileged_uid : getuid();
  header.map_gid = root ? options.unprivileged_gid : getgid();
  header.max_output_file_bytes = options.max_output_file_bytes;
  const int resources[ChildPlan::kNumLimits] = {RLIMIT_AS,    RLIMIT_CPU,    RLIMIT_NPROC,
                                                RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE};
  const rlim_t values[ChildPlan::kNumLimits] = {
      static_cast<rlim_t>(options.memory_bytes),   cpu,
      static_cast<rlim_t>(options.max_processes),  static_cast<rlim_t>(options.max_file_bytes),
      static_cast<rlim_t>(options.max_open_files), 0};
  for (int i = 0; i < ChildPlan::kNumLimits; ++i) {
    header.limit_resources[i] = resources[i];
    // CPU: SIGXCPU at the soft limit, SIGKILL a second later.
    header.limit_cur[i] = values[i];
    header.limit_max[i] = resources[i] == RLIMIT_CPU ? values[i] + 1 : values[i];
  }
  uint64_t flags = 0;
  if (mode.user_namespace) flags |= CLONE_NEWUSER;
  if (mode.namespaces) {
    flags |= CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  }
  if (mode.network_namespace) flags |= CLONE_NEWNET;
  header.clone_flags = flags;
  header.num_args = request.argv.size();
  header.num_env = env.size();
  header.num_files = request.files.size();
  header.num_outputs = request.output_files.size();
  header.num_binds = entries.binds.size();
  header.num_links = entries.links.size();
  header.num_cgroups = cgroup_procs.size();
  header.deny_memfd = in.deny_memfd;
  std::string plan(reinterpret_cast<const char*>(&header), sizeof header);
  append_item(&plan, workdir);
  append_item(&plan, tmpfs_data);
  for (const std::string& a : request.argv) append_item(&plan, a);
  for (const std::string& e : env) append_item(&plan, e);
  for (const SandboxFile& f : request.files) {
    append_item(&plan, f.name);
    const uint32_t file_mode = f.executable ? 0755u : 0644u;
    append_item(&plan, reinterpret_cast<const char*>(&file_mode), sizeof file_mode);
    append_item(&plan, f.contents);
  }
  for (const std::string& name : request.output_files) append_item(&plan, name);
  for (const std::string& bind : entries.binds) append_item(&plan, bind);
  for (const auto& [path, target] : entries.links) {
    append_item(&plan, path);
    append_item(&plan, target);
  }
  for (const std::string& procs : cgroup_procs) append_item(&plan, procs);
  return plan;
}

}  // namespace flywheel::rewards
