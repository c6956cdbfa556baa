// The agent runner of `flywheel rollout` (rollout.agent), from the config.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/rollout/agent/agent_runner.h"
#include "flywheel/rollout/worker/rollout_worker.h"

namespace flywheel::jobs {

// Null when rollout.agent.command is empty. With agents, the worker runs at most
// rollout.agent.max_episodes at once (worker->max_slots). InvalidArgument for an estimator with
// a greedy baseline (remax), which agents do not have; what AgentRunner::create refuses.
absl::StatusOr<std::unique_ptr<rollout::AgentRunner>> make_agent_runner(
    const core::Config& c, const std::string& config_dir, rollout::GenerationEngine* engine,
    const model::TokenizerSetup& tokenizers, const std::string& auth_token,
    rollout::RolloutWorkerOptions* worker);

}  // namespace flywheel::jobs
