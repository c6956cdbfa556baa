#include "flywheel/core/file_io.h"

#include <unistd.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::HasSubstr;

TEST(FileIoTest, WritesAtomicallyAndReadsBack) {
  const std::string path = ::testing::TempDir() + "/flywheel_file_io_" + std::to_string(getpid());
  ASSERT_TRUE(write_file_atomically(path, "{\"a\": 1}").ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(*read_file(path), "{\"a\": 1}");
  EXPECT_EQ(read_json_file(path)->find("a")->as_int(), 1);
  ASSERT_TRUE(write_file_atomically(path, "{\"a\": ").ok());
  absl::Status bad = read_json_file(path).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr(path + ": line 1"));
  std::filesystem::remove(path);
  EXPECT_EQ(read_file(path).status().message(), "cannot read '" + path + "'");
  EXPECT_EQ(write_file_atomically("/proc/flywheel-no-dir/x", "y").code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace flywheel::core
