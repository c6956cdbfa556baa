#include "flywheel/core/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

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
  EXPECT_THAT(std::string(read_file(path).status().message()),
              HasSubstr("cannot read '" + path + "': No such file or directory"));
  EXPECT_EQ(read_file(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(write_file_atomically("/proc/flywheel-no-dir/x", "y").code(),
            absl::StatusCode::kUnavailable);
}

// A FIFO used to block forever (no writer), /dev/zero to be read until memory ran out, and a
// directory to read as an empty file.
TEST(FileIoTest, RefusesDirectoriesFifosAndDevicesWithoutReadingThem) {
  const std::string dir =
      ::testing::TempDir() + "/flywheel_file_io_dir_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/config.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, kind] :
       std::vector<std::pair<std::string, std::string>>{{fifo, "a FIFO (named pipe)"},
                                                        {dir, "a directory"},
                                                        {"/dev/zero", "a character device"},
                                                        {"/dev/urandom", "a character device"}}) {
    absl::StatusOr<std::string> text = read_file(path);
    ASSERT_FALSE(text.ok()) << path;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(std::string(text.status().message()),
                HasSubstr("cannot read '" + path + "': it is " + kind + ", not a regular file"));
    EXPECT_FALSE(read_json_file(path).ok()) << path;
  }
  std::filesystem::remove_all(dir);
}

TEST(FileIoTest, RefusesFilesLargerThanTheLimit) {
  const std::string path =
      ::testing::TempDir() + "/flywheel_file_io_big_" + std::to_string(getpid());
  ASSERT_TRUE(write_file_atomically(path, std::string(100, 'x')).ok());
  ReadFileOptions options;
  options.max_bytes = 99;
  absl::Status too_large = read_file(path, options).status();
  EXPECT_EQ(too_large.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(too_large.message()),
      HasSubstr("cannot read '" + path + "': 100 bytes is more than the limit of 99 bytes"));
  options.max_bytes = 100;
  EXPECT_EQ(read_file(path, options)->size(), 100u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace flywheel::core
