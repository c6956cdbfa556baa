// The OpenAI requests the endpoint serves, read from their JSON bodies: POST /v1/chat/completions
// and POST /v1/completions. Fields the endpoint does not know are ignored, as OpenAI-compatible
// servers do; fields it knows but does not implement are accepted at their neutral value
// (presence_penalty 0, echo false, ...) and refused otherwise, naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent_messages.h"
#include "flywheel/core/json.h"

namespace flywheel::rollout::agent {

// Upper bounds the parser applies (the engine may refuse less: n above its slots).
inline constexpr int64_t kMaxChoices = 128;
inline constexpr int64_t kMaxStops = 4;
inline constexpr int64_t kMaxTopLogprobs = 20;

struct CompletionRequest {
  bool chat = true;                    // /v1/chat/completions, else /v1/completions
  std::vector<AgentMessage> messages;  // chat
  std::vector<ToolSpec> tools;         // chat
  bool parse_tools = true;             // tool_choice "none": replies are content only
  std::string prompt;                  // completions: text ...
  std::vector<int64_t> prompt_ids;     // ... or token ids
  bool prompt_is_ids = false;
  std::string model;  // any string; echoed
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
  std::vector<std::string> stop;
  int64_t n = 1;
  std::optional<uint64_t> seed;
  bool logprobs = false;
  int64_t top_logprobs = 0;  // completions: its `logprobs` integer
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// InvalidArgument naming the field ("messages[2].role: ...") for a body that is not an object,
// fields of the wrong type or out of range, and unimplemented fields at non-neutral values.
absl::StatusOr<CompletionRequest> parse_chat_request(const core::Json& body);
absl::StatusOr<CompletionRequest> parse_completion_request(const core::Json& body);

}  // namespace flywheel::rollout::agent
