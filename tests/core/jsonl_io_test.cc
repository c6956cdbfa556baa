#include "flywheel/core/jsonl_io.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JsonlReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("flywheel_jsonl_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }

  fs::path dir_;
};

// Callers that report every bad line of a file call next() again after an error.
TEST_F(JsonlReaderTest, ContinuesAfterABadLineAndNamesEachLine) {
  const std::string path =
      write("in.jsonl", "{\"a\": 1}\nnot json\r\n[1]\n\n  \n{\"b\": 2}\n{\"long\": \"" +
                            std::string(100, 'x') + "\"}\n{\"c\": 3}");
  JsonlReader::Options options;
  options.max_line_bytes = 64;
  auto reader = JsonlReader::open(path, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  JsonlReader& in = **reader;

  auto a = in.next();
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((**a).find("a")->as_int(), 1);
  EXPECT_EQ(in.where(), path + ":1");

  auto malformed = in.next();
  ASSERT_FALSE(malformed.ok());
  EXPECT_THAT(std::string(malformed.status().message()), HasSubstr(path + ":2: "));

  auto array = in.next();
  ASSERT_FALSE(array.ok());
  EXPECT_THAT(std::string(array.status().message()),
              HasSubstr(path + ":3: expected a JSON object"));

  auto b = in.next();  // blank lines 4 and 5 are skipped
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((**b).find("b")->as_int(), 2);
  EXPECT_EQ(in.where(), path + ":6");

  auto long_line = in.next();
  ASSERT_FALSE(long_line.ok());
  EXPECT_EQ(long_line.status().message(),
            path + ":7: line is longer than 64 bytes (the limit for one JSONL line)");
  EXPECT_EQ(in.where(), path + ":7");

  auto c = in.next();  // the rest of line 7 is skipped; line 8 has no final newline
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((**c).find("c")->as_int(), 3);
  EXPECT_EQ(in.where(), path + ":8");

  auto end = in.next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

// A line far longer than the read buffer, followed by a good one.
TEST_F(JsonlReaderTest, SkipsAHugeLineToItsEnd) {
  const std::string path =
      write("in.jsonl", "{\"ids\": [" + std::string(3 << 20, '7') + "]}\n{\"ok\": true}\n");
  JsonlReader::Options options;
  options.max_line_bytes = 1 << 20;
  auto reader = JsonlReader::open(path, options);
  ASSERT_TRUE(reader.ok());
  EXPECT_THAT(std::string((*reader)->next().status().message()),
              HasSubstr(":1: line is longer than 1048576 bytes"));
  auto ok = (*reader)->next();
  ASSERT_TRUE(ok.ok() && ok->has_value()) << ok.status();
  EXPECT_TRUE((**ok).find("ok")->as_bool());
  EXPECT_EQ((*reader)->where(), path + ":2");
}

// Both used to read as an empty input ("0 sequences", exit 0).
TEST_F(JsonlReaderTest, RefusesDirectoriesAndDevices) {
  auto dir = JsonlReader::open(dir_.string());
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()),
              HasSubstr("cannot read '" + dir_.string() + "': it is a directory"));
  auto zero = JsonlReader::open("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("it is a character device"));
  auto missing = JsonlReader::open((dir_ / "missing.jsonl").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flywheel::core
