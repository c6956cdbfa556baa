#include "flywheel/jobs/agent_setup.h"

#include <algorithm>
#include <filesystem>

namespace flywheel::jobs {

absl::StatusOr<std::unique_ptr<rollout::AgentRunner>> make_agent_runner(
    const core::Config& c, const std::string& config_dir, rollout::GenerationEngine* engine,
    const model::TokenizerSetup& tokenizers, const std::string& auth_token,
    rollout::RolloutWorkerOptions* worker) {
  if (!c.rollout.agent.enabled()) return std::unique_ptr<rollout::AgentRunner>();
  if (worker->greedy_baseline) {
    return absl::InvalidArgumentError(
        "rollout.agent.command: an estimator with a greedy baseline (remax) is not implemented "
        "for agent episodes");
  }
  rollout::AgentRunnerOptions options;
  options.agent = c.rollout.agent;
  options.working_dir = std::filesystem::absolute(config_dir.empty() ? "." : config_dir).string();
  options.sampling = worker->sampling;
  options.auth_token = auth_token;
  options.model_name = std::filesystem::path(c.model.path).filename().string();
  if (options.model_name.empty()) options.model_name = "flywheel";
  options.max_slots = c.rollout.max_slots;
  worker->max_slots = std::min(worker->max_slots, c.rollout.agent.max_episodes);
  return rollout::AgentRunner::create(engine, tokenizers, options);
}

}  // namespace flywheel::jobs
