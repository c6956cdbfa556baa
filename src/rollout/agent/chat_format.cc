#include "chat_format.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace flywheel::rollout::agent {
namespace {

constexpr char kToolCallOpen[] = "<tool_call>";
constexpr char kToolCallClose[] = "</tool_call>";

void append_python_json(const core::Json& json, std::string* out) {
  switch (json.type()) {
    case core::Json::Type::kArray: {
      out->push_back('[');
      bool first = true;
      for (const core::Json& item : json.as_array()) {
        if (!first) out->append(", ");
        first = false;
        append_python_json(item, out);
      }
      out->push_back(']');
      return;
    }
    case core::Json::Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, value] : json.as_object()) {
        if (!first) out->append(", ");
        first = false;
        core::append_json_string(key, out);
        out->append(": ");
        append_python_json(value, out);
      }
      out->push_back('}');
      return;
    }
    default:
      json.dump_to(out);
  }
}

// The single string parameter a tags-format tool call writes; "" when the tool has not exactly
// one parameter.
std::string single_parameter(const ToolSpec& tool) {
  const core::Json* properties =
      tool.parameters.is_object() ? tool.parameters.find("properties") : nullptr;
  if (properties == nullptr || !properties->is_object() || properties->as_object().size() != 1) {
    return "";
  }
  return properties->as_object().front().first;
}

std::string arguments_text(const std::string& arguments) {
  absl::StatusOr<core::Json> parsed = core::Json::parse(arguments);
  return parsed.ok() ? python_json(*parsed) : arguments;
}

}  // namespace

std::string python_json(const core::Json& json) {
  std::string out;
  append_python_json(json, &out);
  return out;
}

bool same_message(const AgentMessage& a, const AgentMessage& b) {
  if (a.role != b.role || a.content != b.content || a.tool_call_id != b.tool_call_id ||
      a.tool_calls.size() != b.tool_calls.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const ToolCall& x = a.tool_calls[i];
    const ToolCall& y = b.tool_calls[i];
    if (x.id != y.id || x.name != y.name) return false;
    if (x.arguments != y.arguments && arguments_text(x.arguments) != arguments_text(y.arguments)) {
      return false;
    }
  }
  return true;
}

ChatFormat::ChatFormat(const std::optional<model::ChatTemplate>& chat_template,
                       core::ToolFormat tool_format) {
  if (chat_template) {
    const std::string& name = chat_template->name();
    kind_ = name == "llama3" ? Kind::kLlama3 : Kind::kChatml;
    default_system_ = chat_template->default_system();
    if (kind_ == Kind::kLlama3) bos_ = "<|begin_of_text|>";
    end_of_turn_ = kind_ == Kind::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
  }
  tool_format_ = tool_format != core::ToolFormat::kAuto ? tool_format
                 : chat_template                        ? core::ToolFormat::kHermes
                                                        : core::ToolFormat::kTags;
}

std::string ChatFormat::tools_text(const std::vector<ToolSpec>& tools) const {
  if (tools.empty() || tool_format_ != core::ToolFormat::kHermes) return "";
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
      "provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolSpec& tool : tools) {
    core::Json wrapped = core::Json::object();
    wrapped.set("type", "function");
    wrapped.set("function", tool.function);
    absl::StrAppend(&out, "\n", python_json(wrapped));
  }
  absl::StrAppend(&out,
                  "\n</tools>\n\nFor each function call, return a json object with function name "
                  "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                  "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
  return out;
}

std::string ChatFormat::generation_prompt() const {
  switch (kind_) {
    case Kind::kChatml:
      return "<|im_start|>assistant\n";
    case Kind::kLlama3:
      return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case Kind::kNone:
      break;
  }
  return "";
}

absl::StatusOr<std::string> ChatFormat::assistant_text(const AgentMessage& m, int64_t index) const {
  std::string out = m.content;
  for (size_t c = 0; c < m.tool_calls.size(); ++c) {
    const ToolCall& call = m.tool_calls[c];
    if (tool_format_ == core::ToolFormat::kHermes) {
      if (kind_ != Kind::kNone && (!out.empty() || c > 0)) out += "\n";
      absl::StrAppend(&out, kToolCallOpen, "\n{\"name\": ");
      core::append_json_string(call.name, &out);
      absl::StrAppend(&out, ", \"arguments\": ", arguments_text(call.arguments), "}\n",
                      kToolCallClose);
      continue;
    }
    absl::StatusOr<core::Json> args = core::Json::parse(call.arguments);
    if (!args.ok() || !args->is_object() || args->as_object().size() != 1 ||
        !args->as_object().front().second.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", index, "].tool_calls[", c,
                       "].function.arguments: the tags tool format writes calls of one string "
                       "argument only"));
    }
    absl::StrAppend(&out, "<", call.name, ">", args->as_object().front().second.as_string(), "</",
                    call.name, ">");
  }
  return out;
}

absl::StatusOr<std::string> ChatFormat::render_messages(const std::vector<AgentMessage>& messages,
                                                        int64_t first_index,
                                                        bool after_assistant) const {
  std::string out;
  const bool hermes = tool_format_ == core::ToolFormat::kHermes;
  for (size_t i = 0; i < messages.size(); ++i) {
    const AgentMessage& m = messages[i];
    const int64_t index = first_index + static_cast<int64_t>(i);
    std::string body;
    std::string role = m.role;
    if (m.role == "system" || m.role == "user") {
      body = m.content;
    } else if (m.role == "assistant") {
      absl::StatusOr<std::string> text = assistant_text(m, index);
      if (!text.ok()) return text.status();
      body = *std::move(text);
    } else if (m.role == "tool") {
      body = hermes ? absl::StrCat("<tool_response>\n", m.content, "\n</tool_response>")
                    : absl::StrCat("<result>", m.content, "</result>");
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", index, "].role: '", m.role,
                       "' is not one of system, user, assistant, tool"));
    }
    const bool prev_tool = i > 0 && messages[i - 1].role == "tool";
    const bool next_tool = i + 1 < messages.size() && messages[i + 1].role == "tool";
    switch (kind_) {
      case Kind::kNone:
        out += body;
        break;
      case Kind::kChatml:
        if (m.role == "tool") {
          // Consecutive tool results share one user turn, as Qwen's templates write them.
          if (!prev_tool) out += "<|im_start|>user";
          absl::StrAppend(&out, "\n", body);
          if (!next_tool) out += "<|im_end|>\n";
        } else {
          absl::StrAppend(&out, "<|im_start|>", role, "\n", body, "<|im_end|>\n");
        }
        break;
      case Kind::kLlama3:
        if (m.role == "tool") role = "ipython";
        absl::StrAppend(&out, "<|start_header_id|>", role, "<|end_header_id|>\n\n",
                        m.role == "tool" ? body : std::string(absl::StripAsciiWhitespace(body)),
                        "<|eot_id|>");
        break;
    }
  }
  // ChatML writes "\n" after an assistant turn's <|im_end|>: the stream holds the turn up to it.
  if (after_assistant && kind_ == Kind::kChatml) out.insert(0, "\n");
  return out;
}

absl::StatusOr<std::string> ChatFormat::render(const std::vector<AgentMessage>& messages,
                                               const std::vector<ToolSpec>& tools) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: must not be empty");
  std::vector<AgentMessage> all = messages;
  const std::string tools_block = tools_text(tools);
  if (kind_ != Kind::kNone) {
    if (all.front().role != "system" && (!default_system_.empty() || !tools_block.empty())) {
      all.insert(all.begin(), AgentMessage{"system", default_system_, {}, "", ""});
    }
    if (all.front().role == "system" && !tools_block.empty()) {
      AgentMessage& system = all.front();
      system.content =
          system.content.empty() ? tools_block : absl::StrCat(system.content, "\n\n", tools_block);
    }
  } else if (!tools_block.empty()) {
    all.insert(all.begin(), AgentMessage{"system", absl::StrCat(tools_block, "\n"), {}, "", ""});
  }
  // Errors name the agent's indices, not counting a system message flywheel inserted.
  const int64_t offset = -static_cast<int64_t>(all.size() - messages.size());
  absl::StatusOr<std::string> body = render_messages(all, offset, false);
  if (!body.ok()) return body.status();
  return absl::StrCat(bos_, *body, generation_prompt());
}

absl::StatusOr<std::string> ChatFormat::render_after_assistant(
    const std::vector<AgentMessage>& messages, size_t first_index) const {
  absl::StatusOr<std::string> body =
      render_messages(messages, static_cast<int64_t>(first_index), true);
  if (!body.ok()) return body.status();
  return absl::StrCat(*body, generation_prompt());
}

std::vector<std::string> ChatFormat::stop_strings(const std::vector<ToolSpec>& tools) const {
  std::vector<std::string> out;
  if (tool_format_ != core::ToolFormat::kTags) return out;
  for (const ToolSpec& tool : tools) {
    if (!single_parameter(tool).empty()) out.push_back(absl::StrCat("</", tool.name, ">"));
  }
  return out;
}

ParsedReply ChatFormat::parse_reply(const std::string& text,
                                    const std::vector<ToolSpec>& tools) const {
  ParsedReply reply;
  reply.content = text;
  if (tools.empty()) return reply;
  if (tool_format_ == core::ToolFormat::kHermes) {
    const size_t first = text.find(kToolCallOpen);
    if (first == std::string::npos) return reply;
    std::vector<ToolCall> calls;
    size_t at = first;
    while (at != std::string::npos) {
      const size_t body = at + std::strlen(kToolCallOpen);
      const size_t close = text.find(kToolCallClose, body);
      if (close == std::string::npos) return reply;  // cut off: not a call
      absl::StatusOr<core::Json> call =
          core::Json::parse(absl::StripAsciiWhitespace(text.substr(body, close - body)));
      if (!call.ok() || !call->is_object()) return reply;
      const core::Json* name = call->find("name");
      const core::Json* args = call->find("arguments");
      if (args == nullptr) args = call->find("parameters");
      if (name == nullptr || !name->is_string() || args == nullptr || !args->is_object()) {
        return reply;
      }
      calls.push_back({"", name->as_string(), args->dump()});
      const size_t next = close + std::strlen(kToolCallClose);
      const size_t following = text.find(kToolCallOpen, next);
      if (following == std::string::npos &&
          !absl::StripAsciiWhitespace(text.substr(next)).empty()) {
        return reply;  // text after the calls: not a clean call
      }
      at = following;
    }
    reply.content = std::string(absl::StripTrailingAsciiWhitespace(text.substr(0, first)));
    reply.tool_calls = std::move(calls);
    return reply;
  }
  // tags: the first <NAME>VALUE</NAME> of a tool of one parameter.
  size_t best = std::string::npos;
  for (const ToolSpec& tool : tools) {
    const std::string parameter = single_parameter(tool);
    if (parameter.empty()) continue;
    const std::string open = absl::StrCat("<", tool.name, ">");
    const size_t start = text.find(open);
    if (start == std::string::npos || start >= best) continue;
    const size_t value = start + open.size();
    const size_t close = text.find(absl::StrCat("</", tool.name, ">"), value);
    if (close == std::string::npos) continue;
    core::Json args = core::Json::object();
    args.set(parameter, text.substr(value, close - value));
    best = start;
    reply.content = text.substr(0, start);
    reply.tool_calls = {{"", tool.name, args.dump()}};
  }
  return reply;
}

}  // namespace flywheel::rollout::agent
