// A fresh directory for one test: under gtest's temporary directory, named after the test (and
// the process and a counter, so that ranks and repeated fixtures never share one), created
// empty and removed with everything in it when the object goes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace flywheel::testing {

class ScratchDir {
 public:
  // `prefix` names what the directory is for ("flywheel_st", ...).
  explicit ScratchDir(const std::string& prefix = "flywheel_test") {
    static std::atomic<int> counter{0};
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info != nullptr ? info->name() : "global";
    path_ =
        std::filesystem::path(::testing::TempDir()) /
        (prefix + "_" + test + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // A path inside the directory.
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace flywheel::testing
