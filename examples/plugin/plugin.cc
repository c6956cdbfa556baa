// The plugin's entry points: the ABI version and flywheel_register_plugin().
#include "cispo_loss.h"
#include "countdown_environment.h"
#include "csv_metrics_sink.h"
#include "flywheel/core/plugin_registry.h"
#include "median_baseline.h"
#include "short_answer_reward.h"

FLYWHEEL_PLUGIN_ABI()

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
  auto& sinks =
      registry.get<flywheel::core::MetricsSink, const flywheel::core::MetricsSinkOptions&>();
  // A failed add() (e.g. a name taken by another plugin) is reported by the loader.
  (void)sinks.add("csv", &flywheel_example::CsvMetricsSink::create);
  using flywheel::algos::AdvantageEstimator;
  using flywheel::algos::EstimatorOptions;
  using flywheel::algos::PolicyLoss;
  using flywheel::algos::PolicyLossOptions;
  (void)registry.get<PolicyLoss, const PolicyLossOptions&>().add(
      "cispo", &flywheel_example::CispoLoss::create);
  (void)registry.get<AdvantageEstimator, const EstimatorOptions&>().add(
      "median_baseline", &flywheel_example::MedianBaseline::create);
  using flywheel::rewards::RewardFunction;
  using flywheel::rewards::RewardSpec;
  (void)registry.get<RewardFunction, const RewardSpec&>().add(
      "short_answer", &flywheel_example::ShortAnswerReward::create);
  using flywheel::rollout::Environment;
  using flywheel::rollout::EnvironmentSpec;
  (void)registry.get<Environment, const EnvironmentSpec&>().add(
      "countdown", &flywheel_example::CountdownEnvironment::create);
}
