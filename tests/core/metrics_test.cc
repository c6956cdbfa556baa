#include "flywheel/core/metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "console_sink.h"
#include "flywheel/core/builtins.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/plugin_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tensorboard_event.pb.h"
#include "tensorboard_sink.h"

namespace flywheel::core {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t u32_le(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

// Splits a TFRecord file into records, checking both CRCs of each one.
std::vector<std::string> read_tfrecords(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u) << "truncated header at " << at;
    if (bytes.size() - at < 12) break;
    uint64_t length;
    std::memcpy(&length, bytes.data() + at, 8);
    EXPECT_EQ(u32_le(bytes, at + 8), mask_crc32c(crc32c(bytes.data() + at, 8)))
        << "bad length CRC at " << at;
    EXPECT_GE(bytes.size() - at - 12, length + 4) << "truncated record at " << at;
    if (bytes.size() - at - 12 < length + 4) break;
    std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(u32_le(bytes, at + 12 + length), mask_crc32c(crc32c(data.data(), data.size())))
        << "bad data CRC at " << at;
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    run_dir_ = fs::path(::testing::TempDir()) /
               (std::string("flywheel_metrics_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(run_dir_);
    ASSERT_TRUE(register_core_builtins(registry_).ok());
  }
  void TearDown() override { fs::remove_all(run_dir_); }

  std::unique_ptr<MetricsLogger> make_logger(std::vector<std::string> sinks) {
    MetricsLoggerOptions options;
    options.sinks = std::move(sinks);
    options.sink_options.run_dir = run_dir_.string();
    options.sink_options.total_steps = 4;
    options.sink_options.console_interval_s = 0;
    options.sink_options.console = &console_;
    options.clock = [this] { return now_ += 2.0; };
    absl::StatusOr<std::unique_ptr<MetricsLogger>> logger =
        MetricsLogger::create(options, registry_);
    EXPECT_TRUE(logger.ok()) << logger.status();
    return logger.ok() ? std::move(*logger) : nullptr;
  }

  fs::path run_dir_;
  PluginRegistry registry_;
  std::ostringstream console_;
  double now_ = 1000.0;
};

TEST_F(MetricsTest, JsonlHasOneLinePerStepWithEveryScalar) {
  auto logger = make_logger({"jsonl"});
  logger->log_scalar("loss", 0.5, 1);
  logger->log_scalar("reward", 1.25, 1);
  logger->log_scalar("loss", 0.25, 2);
  logger->log_scalar("loss", 0.125, 2);  // last value of a step wins
  logger->log_scalar("weird \"name\"", NAN, 3);
  ASSERT_TRUE(logger->flush().ok());
  EXPECT_EQ(
      read_file(run_dir_ / "metrics.jsonl"),
      "{\"step\": 1, \"wall_time\": 1002.000, \"scalars\": {\"loss\": 0.5, \"reward\": 1.25}}\n"
      "{\"step\": 2, \"wall_time\": 1004.000, \"scalars\": {\"loss\": 0.125}}\n"
      "{\"step\": 3, \"wall_time\": 1006.000, \"scalars\": {\"weird \\\"name\\\"\": \"nan\"}}\n");
}

TEST_F(MetricsTest, JsonlAppendsAcrossLoggers) {
  make_logger({"jsonl"})->log_scalar("a", 1, 1);  // destructor flushes
  make_logger({"jsonl"})->log_scalar("a", 2, 2);
  std::string text = read_file(run_dir_ / "metrics.jsonl");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

TEST_F(MetricsTest, TensorBoardEventsReadBackWithValidCrcs) {
  auto logger = make_logger({"tensorboard"});
  logger->log_scalar("loss", 0.5, 1);
  logger->log_scalar("reward/mean", 2.0, 1);
  logger->log_scalar("loss", 0.25, 7);
  ASSERT_TRUE(logger->flush().ok());

  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(run_dir_ / "tensorboard")) {
    files.push_back(entry.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0].filename().string(), HasSubstr("events.out.tfevents."));
  std::vector<std::string> records = read_tfrecords(read_file(files[0]));
  ASSERT_EQ(records.size(), 4u);

  test::tensorboard::Event header;
  ASSERT_TRUE(header.ParseFromString(records[0]));
  EXPECT_EQ(header.file_version(), "brain.Event:2");

  std::vector<std::tuple<int64_t, std::string, float, double>> scalars;
  for (size_t i = 1; i < records.size(); ++i) {
    test::tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString(records[i]));
    ASSERT_EQ(event.summary().value_size(), 1);
    scalars.emplace_back(event.step(), event.summary().value(0).tag(),
                         event.summary().value(0).simple_value(), event.wall_time());
  }
  EXPECT_EQ(scalars[0], std::make_tuple(int64_t{1}, std::string("loss"), 0.5f, 1002.0));
  EXPECT_EQ(scalars[1], std::make_tuple(int64_t{1}, std::string("reward/mean"), 2.0f, 1002.0));
  EXPECT_EQ(scalars[2], std::make_tuple(int64_t{7}, std::string("loss"), 0.25f, 1004.0));
}

TEST_F(MetricsTest, TfRecordFramingDetectsCorruption) {
  std::string record = frame_tfrecord(encode_event(1.0, 2, "", "x", 3.0f));
  EXPECT_EQ(read_tfrecords(record).size(), 1u);
  record[14] ^= 0x01;  // flip a data bit
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    read_tfrecords(record);
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_THAT(failures.GetTestPartResult(0).message(), HasSubstr("bad data CRC"));
}

TEST_F(MetricsTest, ConsolePrintsProgressBarEtaAndScalars) {
  auto logger = make_logger({"console"});
  logger->log_scalar("loss", 0.5, 1);
  logger->log_scalar("loss", 0.25, 2);
  logger->log_scalar("loss", 0.125, 4);
  ASSERT_TRUE(logger->flush().ok());
  EXPECT_EQ(console_.str(),
            "step 1/4 [#####...............]  25% | loss 0.5\n"
            "step 2/4 [##########..........]  50%  2.00 s/step  ETA 4s | loss 0.25\n"
            "step 4/4 [####################] 100%  1.33 s/step  ETA 0s | loss 0.125\n");
}

TEST_F(MetricsTest, ConsoleThrottlesToTheIntervalButAlwaysPrintsTheLastStep) {
  MetricsSinkOptions options;
  options.total_steps = 10;
  options.console_interval_s = 5;
  std::ostringstream out;
  options.console = &out;
  auto sink = ConsoleSink::create(options);
  ASSERT_TRUE(sink.ok());
  for (int step = 1; step <= 10; ++step) {
    ASSERT_TRUE((*sink)->write(StepMetrics{step, 100.0 + step, {{"x", 1.0}}}).ok());
  }
  std::string text = out.str();
  // Steps 1 (first), 6 (5 s later) and 10 (last).
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_THAT(text, HasSubstr("step 6/10"));
  EXPECT_THAT(text, HasSubstr("step 10/10"));
}

TEST(FormatDurationTest, UsesCompactUnits) {
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(132), "2m12s");
  EXPECT_EQ(format_duration(3780), "1h03m");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST_F(MetricsTest, UnknownSinkIsAnErrorListingTheKnownOnes) {
  MetricsLoggerOptions options;
  options.sinks = {"wandb"};
  absl::Status status = MetricsLogger::create(options, registry_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("unknown metrics_sink 'wandb'; known: console, jsonl, tensorboard"));
}

TEST_F(MetricsTest, UnwritableRunDirIsAnError) {
  MetricsLoggerOptions options;
  options.sinks = {"jsonl"};
  options.sink_options.run_dir = "/proc/flywheel-cannot-write-here";
  EXPECT_EQ(MetricsLogger::create(options, registry_).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace flywheel::core
