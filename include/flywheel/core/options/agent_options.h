// `rollout.agent:` — black-box agents trained through an OpenAI-compatible endpoint on each
// rollout worker (docs/agents.md). Off while `command` is empty.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// rollout.agent.on_rewrite: what an episode does when a request's messages do not extend its
// token stream (the agent edited or dropped earlier messages).
enum class OnRewrite { kSegment, kDrop };
absl::Span<const ChoiceName<OnRewrite>> choice_names(OnRewrite);

// rollout.agent.mode: one run of the command per episode, or long-lived runs that take episode
// after episode as JSON lines on stdin (docs/agents.md).
enum class AgentMode { kEpisode, kPersistent };
absl::Span<const ChoiceName<AgentMode>> choice_names(AgentMode);

// rollout.agent.tool_format: how tools, tool calls and tool results are written as text.
enum class ToolFormat { kAuto, kHermes, kTags };
absl::Span<const ChoiceName<ToolFormat>> choice_names(ToolFormat);

struct AgentOptions {
  std::vector<std::string> command;  // executable and arguments; empty = no agents
  AgentMode mode = AgentMode::kEpisode;
  std::string host = "127.0.0.1";  // the endpoint's address
  int64_t port = 0;                // 0 = any free port (each worker its own)
  double timeout_s = 300;          // per episode, from its start
  int64_t max_episodes = 64;       // episodes (agent processes) running at once per worker
  OnRewrite on_rewrite = OnRewrite::kSegment;
  int64_t max_segments = 4;                    // per episode, with on_rewrite: segment
  ToolFormat tool_format = ToolFormat::kAuto;  // auto: hermes with a chat template, else tags
  bool request_sampling = false;  // honour requests' temperature / top_p (not the run's)
  int64_t max_request_bytes = int64_t{8} << 20;  // larger bodies: 413
  int64_t max_queued_requests = 64;              // requests waiting for the engine; more: 429

  bool enabled() const { return !command.empty(); }
  absl::Status validate() const;
};

void bind_options(FieldBinder& b, AgentOptions& o);

}  // namespace flywheel::core
