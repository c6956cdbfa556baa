#include "flywheel/core/logging.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LoggingTest, ParsesLevelNames) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("error"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("verbose").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoggingTest, FileGetsLinesWithRolePrefixAtOrAboveTheLevel) {
  std::string path = ::testing::TempDir() + "/flywheel_log_" + std::to_string(getpid()) + ".txt";
  std::filesystem::remove(path);
  set_log_prefix("learner", 3);
  ASSERT_TRUE(set_log_file(path).ok());
  set_log_level(LogLevel::kInfo);
  FLYWHEEL_LOG_INFO("step %d done", 7);
  FLYWHEEL_LOG_DEBUG("hidden %s", "detail");
  set_log_level(LogLevel::kDebug);
  EXPECT_TRUE(should_log(LogLevel::kDebug));
  FLYWHEEL_LOG_DEBUG("shown %s", "detail");
  ASSERT_TRUE(set_log_file("").ok());  // closes the file sink
  set_log_level(LogLevel::kInfo);
  set_log_prefix("test", -1);

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("[learner 3] step 7 done"));
  EXPECT_THAT(text.str(), HasSubstr("shown detail"));
  EXPECT_THAT(text.str(), Not(HasSubstr("hidden detail")));
  std::filesystem::remove(path);
}

TEST(LoggingTest, UnwritableLogFileIsAnError) {
  EXPECT_EQ(set_log_file("/proc/flywheel-no-such-dir/y.log").code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace flywheel::core
