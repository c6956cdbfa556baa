// The OpenAI chat messages and tools an agent sends, as the endpoint reads them.
#pragma once

#include <string>
#include <vector>

#include "flywheel/core/json.h"

namespace flywheel::rollout::agent {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `function.arguments`)
};

struct AgentMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;                  // tool: the function's name, when given
};

// The same message for the endpoint's stream check: role, content, tool_call_id and the tool
// calls (id, name, and arguments equal as JSON, so that an SDK that re-serialises them matches).
bool same_message(const AgentMessage& a, const AgentMessage& b);

struct ToolSpec {
  std::string name;
  std::string description;
  core::Json parameters;  // JSON schema object; null when absent
  core::Json function;    // the whole `function` object as sent (rendered for the model)
};

}  // namespace flywheel::rollout::agent
