// Loads the out-of-tree example plugin named by $FLYWHEEL_EXAMPLE_PLUGIN (set by
// example_plugin_test.sh) and writes metrics through the `csv` sink it registers.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "flywheel/algos/algorithm.h"
#include "flywheel/algos/presets.h"
#include "flywheel/core/builtins.h"
#include "flywheel/core/config_loader.h"
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

// The custom loss and estimator, selected by name from the YAML config.
TEST(ExamplePluginTest, CustomLossAndEstimatorSelectedFromYaml) {
  const char* plugin = std::getenv("FLYWHEEL_EXAMPLE_PLUGIN");
  const char* config_path = std::getenv("FLYWHEEL_EXAMPLE_CONFIG");
  ASSERT_NE(plugin, nullptr);
  ASSERT_NE(config_path, nullptr);
  auto loaded = load_config_file(config_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(algos::apply_algorithm_preset(&*loaded).ok());
  PluginRegistry registry;
  ASSERT_TRUE(algos::register_algos_builtins(registry).ok());
  ASSERT_TRUE(registry.load_plugin(plugin).ok());
  auto algorithm = algos::Algorithm::create(loaded->config, registry);
  ASSERT_TRUE(algorithm.ok()) << algorithm.status();

  // median_baseline: group {1, 2, 10} has median 2.
  algos::AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1, 2, 10});
  in.group_ids = at::tensor(std::vector<int64_t>{0, 0, 0});
  in.mask = at::ones({3, 2});
  auto adv = algorithm->estimator->compute(in);
  ASSERT_TRUE(adv.ok()) << adv.status();
  EXPECT_TRUE(at::allclose(adv->advantages,
                           at::tensor(std::vector<float>{-1, -1, 0, 0, 8, 8}).view({3, 2})));

  // cispo with the grpo preset's clip_high 0.2: rho 1.5 is clipped to 1.2 but keeps gradient.
  at::Tensor lp =
      at::log(at::tensor(std::vector<float>{1.5, 0.5})).view({1, 2}).requires_grad_(true);
  algos::PolicyLossInput loss_in;
  loss_in.logprobs = lp;
  loss_in.old_logprobs = at::zeros({1, 2});
  loss_in.advantages = at::ones({1, 2});
  loss_in.mask = at::ones({1, 2});
  loss_in.counts = algos::local_counts(loss_in.mask);
  auto loss = algorithm->policy_loss->compute(loss_in);
  ASSERT_TRUE(loss.ok()) << loss.status();
  loss->loss.backward();
  EXPECT_TRUE(
      at::allclose(lp.grad(), at::tensor(std::vector<float>{-1.2f / 2, -0.5f / 2}).view({1, 2})));
}

}  // namespace
}  // namespace flywheel::core
