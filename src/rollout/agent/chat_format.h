// How an agent's conversation is written for the model: the chat template's turns, the tools
// (in the system turn), tool calls in assistant turns and tool results, and how a reply is read
// back into content and tool calls (rollout.agent.tool_format).
//
//   hermes (Qwen2.5 / Qwen3): tools listed in <tools></tools>, calls written
//     <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, results inside
//     <tool_response>\n...\n</tool_response> in a user turn (Llama 3: an ipython turn).
//   tags (tiny models without a chat template): a call of a tool with one string parameter is
//     <NAME>VALUE</NAME>, its result <result>...</result>; tools are not listed.
//
// Without a chat template (tokenizer.chat_template: none) messages are concatenated as they are,
// with no generation prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent_messages.h"
#include "flywheel/core/options/agent_options.h"
#include "flywheel/model/tokenizer/chat_template.h"

namespace flywheel::rollout::agent {

struct ParsedReply {
  std::string content;
  std::vector<ToolCall> tool_calls;  // ids unset
};

class ChatFormat {
 public:
  // `chat_template` none: plain concatenation. tool_format auto: hermes with a template, tags
  // without.
  ChatFormat(const std::optional<model::ChatTemplate>& chat_template, core::ToolFormat tool_format);

  // The whole conversation and the generation prompt. InvalidArgument naming "messages[i]" for
  // an unknown role, a tool call of a tool the tags format cannot write, or no messages.
  absl::StatusOr<std::string> render(const std::vector<AgentMessage>& messages,
                                     const std::vector<ToolSpec>& tools) const;
  // `messages` following an assistant turn that is already in the stream (closed by its end of
  // turn), then the generation prompt. `first_index` numbers the messages in errors.
  absl::StatusOr<std::string> render_after_assistant(const std::vector<AgentMessage>& messages,
                                                     size_t first_index) const;
  // Strings that end a reply besides the end of turn (tags: "</NAME>" of every tool).
  std::vector<std::string> stop_strings(const std::vector<ToolSpec>& tools) const;
  // A reply (the model's text, its end of turn removed) as content and tool calls. Text that
  // does not parse as a call stays content.
  ParsedReply parse_reply(const std::string& text, const std::vector<ToolSpec>& tools) const;
  // The text that closes an assistant turn ("<|im_end|>", "<|eot_id|>"; "" without a template).
  const std::string& end_of_turn() const { return end_of_turn_; }
  core::ToolFormat tool_format() const { return tool_format_; }

 private:
  enum class Kind { kNone, kChatml, kLlama3 };
  absl::StatusOr<std::string> render_messages(const std::vector<AgentMessage>& messages,
                                              int64_t first_index, bool after_assistant) const;
  absl::StatusOr<std::string> assistant_text(const AgentMessage& m, int64_t index) const;
  std::string tools_text(const std::vector<ToolSpec>& tools) const;
  std::string generation_prompt() const;

  Kind kind_ = Kind::kNone;
  core::ToolFormat tool_format_ = core::ToolFormat::kTags;
  std::string default_system_;
  std::string bos_;
  std::string end_of_turn_;
};

// `json` written as Python's json.dumps does by default (", " and ": " separators), as the
// Hugging Face templates' tojson writes tools and arguments.
std::string python_json(const core::Json& json);

}  // namespace flywheel::rollout::agent
