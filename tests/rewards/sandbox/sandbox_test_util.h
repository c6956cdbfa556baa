// Helpers shared by the sandbox and code_exec tests.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace flywheel::rewards {

inline constexpr char kPython[] = "/usr/bin/python3";

// A fresh 14-character token ("fw" + 12 hex digits) that fits a process's comm name.
inline std::string unique_marker() {
  static std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("fw%012x", rng() & 0xffffffffffffULL);
}

inline std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Host pids whose comm or command line contains `marker`.
inline std::vector<int> processes_with_marker(const std::string& marker) {
  std::vector<int> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (dirent* entry = readdir(proc)) {
    int pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    const std::string base = absl::StrCat("/proc/", pid, "/");
    if (read_small_file(base + "comm").find(marker) != std::string::npos ||
        read_small_file(base + "cmdline").find(marker) != std::string::npos) {
      out.push_back(pid);
    }
  }
  closedir(proc);
  return out;
}

// Names of the sandbox directories in /tmp.
inline std::vector<std::string> sandbox_dirs() {
  std::vector<std::string> out;
  DIR* tmp = opendir("/tmp");
  if (!tmp) return out;
  while (dirent* entry = readdir(tmp)) {
    if (absl::StartsWith(entry->d_name, "flywheel-sbx-")) out.push_back(entry->d_name);
  }
  closedir(tmp);
  return out;
}

// Python that names its process (and the children it forks) `marker`, so that a scan of /proc
// finds anything the program leaves behind.
inline std::string marked_python(const std::string& marker, const std::string& body) {
  return absl::StrCat(
      "import ctypes\n"
      "ctypes.CDLL(None).prctl(15, b'",
      marker, "', 0, 0, 0)\n", body);
}

}  // namespace flywheel::rewards
