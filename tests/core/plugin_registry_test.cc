#include "flywheel/core/plugin_registry.h"

#include "absl/strings/str_cat.h"
#include "flywheel/core/builtins.h"
#include "flywheel/core/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::string plugin_path(const std::string& name) {
  return std::string(FLYWHEEL_TEST_PLUGIN_DIR) + "/libtest_plugin_" + name + ".so";
}

class PluginLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(register_core_builtins(registry_).ok()); }
  std::vector<std::string> sinks() const { return registry_.names("metrics_sink"); }
  PluginRegistry registry_;
};

TEST_F(PluginLoaderTest, LoadsPluginAndItsFactoriesAreUsable) {
  ASSERT_TRUE(registry_.load_plugin(plugin_path("good")).ok());
  EXPECT_THAT(sinks(), Contains("memory"));
  auto sink = registry_.get<MetricsSink, const MetricsSinkOptions&>().create("memory", {});
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_TRUE((*sink)->write(StepMetrics{}).ok());
  EXPECT_EQ(registry_.loaded_plugins(), std::vector<std::string>{plugin_path("good")});
}

TEST_F(PluginLoaderTest, MissingFileIsNotFound) {
  absl::Status status = registry_.load_plugin("/nonexistent/libmissing.so");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "plugin file '/nonexistent/libmissing.so' does not exist");
}

TEST_F(PluginLoaderTest, NonLibraryFileIsAClearError) {
  absl::Status status = registry_.load_plugin(FLYWHEEL_TEST_PLUGIN_DIR "/CMakeFiles");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot load plugin"));
}

TEST_F(PluginLoaderTest, LibraryWithoutEntryPointIsRejected) {
  absl::Status status = registry_.load_plugin(plugin_path("no_entry"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("has no entry point: it must define extern \"C\" void "
                        "flywheel_register_plugin(flywheel::PluginRegistry&)"));
}

TEST_F(PluginLoaderTest, LibraryWithoutAbiVersionIsRejected) {
  absl::Status status = registry_.load_plugin(plugin_path("no_abi"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("add FLYWHEEL_PLUGIN_ABI()"));
}

TEST_F(PluginLoaderTest, AbiVersionMismatchIsRejected) {
  absl::Status status = registry_.load_plugin(plugin_path("wrong_abi"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr(absl::StrCat("built for plugin ABI version ", FLYWHEEL_PLUGIN_ABI_VERSION + 1000,
                             " but this flywheel has ABI version ", FLYWHEEL_PLUGIN_ABI_VERSION)));
}

TEST_F(PluginLoaderTest, DuplicateRegistrationFailsAndRollsBackThePlugin) {
  absl::Status status = registry_.load_plugin(plugin_path("duplicate"));
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("metrics_sink 'console' is already registered (by built-in)"));
  EXPECT_THAT(sinks(), Not(Contains("fresh_name")));
  EXPECT_THAT(sinks(), Contains("console"));
  // The built-in is untouched.
  auto& sink_registry = registry_.get<MetricsSink, const MetricsSinkOptions&>();
  EXPECT_TRUE(sink_registry.create("console", {}).ok());
}

TEST_F(PluginLoaderTest, ThrowingEntryPointFailsCleanly) {
  absl::Status status = registry_.load_plugin(plugin_path("throwing"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("threw: plugin could not initialise its device"));
  EXPECT_THAT(sinks(), Not(Contains("half_done")));
}

TEST_F(PluginLoaderTest, LoadingTheSamePluginTwiceIsAnError) {
  ASSERT_TRUE(registry_.load_plugin(plugin_path("good")).ok());
  EXPECT_EQ(registry_.load_plugin(plugin_path("good")).code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(PluginLoaderTest, LoadPluginsStopsAtTheFirstError) {
  absl::Status status = registry_.load_plugins({plugin_path("no_entry"), plugin_path("good")});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(sinks(), Not(Contains("memory")));
}

}  // namespace
}  // namespace flywheel::core
