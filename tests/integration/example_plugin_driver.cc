// Loads the out-of-tree example plugin named by $FLYWHEEL_EXAMPLE_PLUGIN (set by
// example_plugin_test.sh) and writes metrics through the `csv` sink it registers.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "flywheel/core/builtins.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

TEST(ExamplePluginTest, CsvSinkFromTheOutOfTreePluginWritesMetrics) {
  const char* plugin = std::getenv("FLYWHEEL_EXAMPLE_PLUGIN");
  ASSERT_NE(plugin, nullptr) << "run through tests/integration/example_plugin_test.sh";
  PluginRegistry registry;
  ASSERT_TRUE(register_core_builtins(registry).ok());
  absl::Status loaded = registry.load_plugin(plugin);
  ASSERT_TRUE(loaded.ok()) << loaded;

  std::filesystem::path run_dir =
      std::filesystem::path(::testing::TempDir()) / ("flywheel_csv_" + std::to_string(getpid()));
  std::filesystem::remove_all(run_dir);
  {
    MetricsLoggerOptions options;
    options.sinks = {"csv"};
    options.sink_options.run_dir = run_dir.string();
    auto logger = MetricsLogger::create(options, registry);
    ASSERT_TRUE(logger.ok()) << logger.status();
    (*logger)->log_scalar("loss", 0.5, 1);
    (*logger)->log_scalar("reward", 2, 1);
    (*logger)->log_scalar("loss", 0.25, 2);
    ASSERT_TRUE((*logger)->flush().ok());
  }
  std::ifstream in(run_dir / "metrics.csv");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "step,name,value\n1,loss,0.5\n1,reward,2\n2,loss,0.25\n");
  std::filesystem::remove_all(run_dir);
}

}  // namespace
}  // namespace flywheel::core
