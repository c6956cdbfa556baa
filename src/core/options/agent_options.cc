#include "flywheel/core/options/agent_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<OnRewrite>> choice_names(OnRewrite) {
  static constexpr ChoiceName<OnRewrite> kNames[] = {{OnRewrite::kSegment, "segment"},
                                                     {OnRewrite::kDrop, "drop"}};
  return kNames;
}

absl::Span<const ChoiceName<AgentMode>> choice_names(AgentMode) {
  static constexpr ChoiceName<AgentMode> kNames[] = {{AgentMode::kEpisode, "episode"},
                                                     {AgentMode::kPersistent, "persistent"}};
  return kNames;
}

absl::Span<const ChoiceName<ToolFormat>> choice_names(ToolFormat) {
  static constexpr ChoiceName<ToolFormat> kNames[] = {
      {ToolFormat::kAuto, "auto"}, {ToolFormat::kHermes, "hermes"}, {ToolFormat::kTags, "tags"}};
  return kNames;
}

void bind_options(FieldBinder& b, AgentOptions& o) {
  b.field("command", &o.command,
          FieldInfo("The agent: an executable and its arguments, run from the config's "
                    "directory with OPENAI_BASE_URL set (see mode). Empty: no agents."));
  b.choice("mode", &o.mode,
           FieldInfo("episode: one run of the command per episode, with OPENAI_API_KEY and "
                     "FLYWHEEL_EPISODE_ID set and the prompt record on stdin; its exit ends the "
                     "episode. persistent: up to max_episodes long-lived runs, each taking "
                     "episodes one at a time as JSON lines on stdin ({episode_id, api_key, "
                     "base_url, record}) and ending each with a line {\"episode_id\": ID, "
                     "\"done\": true} on stdout (no process start per episode)."));
  b.field("host", &o.host,
          FieldInfo("Address the endpoint listens on (loopback by default; anything else exposes "
                    "it to the network)."));
  b.field("port", &o.port, FieldInfo("Port of the endpoint; 0: any free port.").min(0).max(65535));
  b.field("timeout_s", &o.timeout_s,
          FieldInfo("Deadline of one episode from its start; past it the agent (the run of the "
                    "command that holds the episode) is killed and the episode ends with an "
                    "error.")
              .greater_than(0));
  b.field("max_episodes", &o.max_episodes,
          FieldInfo("Episodes a worker runs at once, and so agent processes (also bounded by "
                    "rollout.max_slots).")
              .min(1));
  b.choice("on_rewrite", &o.on_rewrite,
           FieldInfo("When an agent rewrites its history (edits or drops earlier messages): "
                     "segment starts a new token stream from the whole conversation, trained as "
                     "a further sequence of the group with the episode's reward (group "
                     "estimators count the episode once); drop ends the episode with an error "
                     "(its group's prompt is issued again)."));
  b.field("max_segments", &o.max_segments,
          FieldInfo("Token streams one episode may have with on_rewrite: segment; a rewrite past "
                    "them ends the episode with an error.")
              .min(1)
              .max(64));
  b.choice("tool_format", &o.tool_format,
           FieldInfo("How tools are written for the model: hermes (<tool_call>{json}</tool_call>, "
                     "Qwen2.5 / Qwen3), tags (<NAME>ARG</NAME> for tools of one string "
                     "parameter, results as <result>...</result>; for tiny models without a chat "
                     "template) or auto (hermes with a chat template, tags without)."));
  b.field("request_sampling", &o.request_sampling,
          FieldInfo("Honour requests' temperature and top_p. Off: the run's rollout.temperature / "
                    "top_p / top_k / min_p, which the learner's log-prob recomputation assumes."));
  b.field("max_request_bytes", &o.max_request_bytes,
          FieldInfo("Largest request body; a larger one is answered 413.").min(1024));
  b.field("max_queued_requests", &o.max_queued_requests,
          FieldInfo("Requests that may wait for the engine; past it requests are answered 429 "
                    "(retry after a second).")
              .min(0));
}

absl::Status AgentOptions::validate() const {
  if (enabled() && command.front().empty()) {
    return absl::InvalidArgumentError("command: the executable (its first entry) is empty");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
