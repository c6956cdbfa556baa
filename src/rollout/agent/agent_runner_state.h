// The state AgentRunner (agent_runner.h) keeps per episode, per persistent agent process and per
// group; private to agent_runner.cc and agent_runner_calls.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent_call.h"
#include "agent_process.h"
#include "episode_stream.h"
#include "flywheel/rollout/agent/agent_runner.h"

namespace flywheel::rollout {

using AgentClock = std::chrono::steady_clock;

struct AgentRunner::Run {
  std::string id;
  std::string key;
  Group* group = nullptr;
  int64_t index = 0;
  std::unique_ptr<agent::AgentProcess> process;
  std::unique_ptr<agent::EpisodeStream> stream;
  AgentClock::time_point started;
  std::shared_ptr<agent::AgentCall> call;  // in the engine
  std::string engine_id;
  int64_t prompt_tokens = 0;         // of the call in the engine
  std::vector<std::string> emitted;  // streaming: text sent so far, per choice
  int64_t requests = 0;
  int64_t tool_call_ids = 0;
  std::optional<double> reward;  // the agent's, when it reported one
  bool ended = false;
  Episode episode;
};

struct AgentRunner::Host {
  std::unique_ptr<agent::AgentProcess> process;
  std::string episode;  // the episode it runs (until its done line); "" = idle
  AgentClock::time_point since;
};

struct AgentRunner::Group {
  EpisodeRequest request;
  std::vector<std::unique_ptr<Run>> runs;
};

}  // namespace flywheel::rollout
