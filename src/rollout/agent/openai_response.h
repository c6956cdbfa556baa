// The endpoint's answers in the OpenAI API's shapes: chat.completion, text_completion, their
// stream chunks, logprobs and usage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "agent_messages.h"
#include "flywheel/core/json.h"

namespace flywheel::rollout::agent {

struct TokenLogprob {
  std::string token;  // the token decoded on its own
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // top_logprobs, most likely first
};

struct ChoiceOut {
  AgentMessage message;  // chat
  std::string text;      // completions
  std::string finish_reason;
  std::vector<TokenLogprob> logprobs;  // empty: "logprobs": null
  int64_t tokens = 0;
};

struct ResponseHead {
  std::string id;
  std::string model;
  int64_t created = 0;
  bool chat = true;
  bool logprobs = false;
};

core::Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
core::Json message_json(const AgentMessage& message);
// A whole non-streaming response.
core::Json response_json(const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                         int64_t prompt_tokens);
// One stream chunk with a delta for choice `index`: content text (chat) or text (completions),
// and, in the final chunk of a choice, its tool calls and finish reason.
core::Json chunk_json(const ResponseHead& head, int64_t index, const std::string& text, bool first,
                      const ChoiceOut* final_choice);
// The usage chunk of a stream (stream_options.include_usage).
core::Json usage_chunk_json(const ResponseHead& head, int64_t prompt_tokens,
                            int64_t completion_tokens);

}  // namespace flywheel::rollout::agent
