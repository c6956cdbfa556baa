#include "openai_request.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flywheel::rollout::agent {
namespace {

using core::Json;

absl::Status bad(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

bool is_valid_tool_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// A message's content: a string, null (as ""), or a list of {"type": "text", "text": ...}.
absl::StatusOr<std::string> read_content(const Json* content, const std::string& field) {
  if (content == nullptr || content->is_null()) return std::string();
  if (content->is_string()) return content->as_string();
  if (!content->is_array()) return bad(field, "must be a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content->as_array().size(); ++i) {
    const Json& part = content->as_array()[i];
    const std::string where = absl::StrCat(field, "[", i, "]");
    const Json* type = part.is_object() ? part.find("type") : nullptr;
    if (type == nullptr || !type->is_string()) return bad(where, "a content part needs a type");
    if (type->as_string() != "text") {
      return bad(absl::StrCat(where, ".type"),
                 absl::StrCat("'", type->as_string(), "' parts are not implemented (text only)"));
    }
    const Json* value = part.find("text");
    if (value == nullptr || !value->is_string()) {
      return bad(absl::StrCat(where, ".text"), "must be a string");
    }
    text += value->as_string();
  }
  return text;
}

absl::StatusOr<ToolCall> read_tool_call(const Json& call, const std::string& field) {
  if (!call.is_object()) return bad(field, "must be an object");
  ToolCall out;
  if (const Json* id = call.find("id"); id != nullptr && !id->is_null()) {
    if (!id->is_string()) return bad(absl::StrCat(field, ".id"), "must be a string");
    out.id = id->as_string();
  }
  if (const Json* type = call.find("type");
      type != nullptr && !(type->is_string() && type->as_string() == "function")) {
    return bad(absl::StrCat(field, ".type"), "must be \"function\"");
  }
  const Json* function = call.find("function");
  if (function == nullptr || !function->is_object()) {
    return bad(absl::StrCat(field, ".function"), "must be an object");
  }
  const Json* name = function->find("name");
  if (name == nullptr || !name->is_string() || name->as_string().empty()) {
    return bad(absl::StrCat(field, ".function.name"), "must be a non-empty string");
  }
  out.name = name->as_string();
  const Json* arguments = function->find("arguments");
  if (arguments == nullptr || !arguments->is_string()) {
    return bad(absl::StrCat(field, ".function.arguments"), "must be a string (JSON text)");
  }
  out.arguments = arguments->as_string();
  return out;
}

absl::StatusOr<AgentMessage> read_message(const Json& m, const std::string& field) {
  if (!m.is_object()) return bad(field, "must be an object");
  const Json* role = m.find("role");
  if (role == nullptr || !role->is_string()) return bad(absl::StrCat(field, ".role"), "missing");
  AgentMessage out;
  out.role = role->as_string();
  if (out.role == "developer") out.role = "system";  // OpenAI's newer name for it
  if (out.role != "system" && out.role != "user" && out.role != "assistant" && out.role != "tool") {
    return bad(absl::StrCat(field, ".role"),
               absl::StrCat("'", out.role,
                            "' is not one of system, developer, user, assistant, "
                            "tool"));
  }
  absl::StatusOr<std::string> content =
      read_content(m.find("content"), absl::StrCat(field, ".content"));
  if (!content.ok()) return content.status();
  out.content = *std::move(content);
  if (const Json* calls = m.find("tool_calls"); calls != nullptr && !calls->is_null()) {
    if (out.role != "assistant") {
      return bad(absl::StrCat(field, ".tool_calls"), "only assistant messages make tool calls");
    }
    if (!calls->is_array()) return bad(absl::StrCat(field, ".tool_calls"), "must be a list");
    for (size_t i = 0; i < calls->as_array().size(); ++i) {
      absl::StatusOr<ToolCall> call =
          read_tool_call(calls->as_array()[i], absl::StrCat(field, ".tool_calls[", i, "]"));
      if (!call.ok()) return call.status();
      out.tool_calls.push_back(*std::move(call));
    }
  }
  if (out.role == "tool") {
    const Json* id = m.find("tool_call_id");
    if (id == nullptr || !id->is_string()) {
      return bad(absl::StrCat(field, ".tool_call_id"), "a tool message needs the call's id");
    }
    out.tool_call_id = id->as_string();
  }
  if (const Json* name = m.find("name"); name != nullptr && name->is_string()) {
    out.name = name->as_string();
  }
  return out;
}

absl::StatusOr<ToolSpec> read_tool(const Json& tool, const std::string& field) {
  if (!tool.is_object()) return bad(field, "must be an object");
  const Json* type = tool.find("type");
  if (type == nullptr || !type->is_string() || type->as_string() != "function") {
    return bad(absl::StrCat(field, ".type"), "must be \"function\"");
  }
  const Json* function = tool.find("function");
  if (function == nullptr || !function->is_object()) {
    return bad(absl::StrCat(field, ".function"), "must be an object");
  }
  ToolSpec out;
  out.function = *function;
  const Json* name = function->find("name");
  if (name == nullptr || !name->is_string() || !is_valid_tool_name(name->as_string())) {
    return bad(absl::StrCat(field, ".function.name"),
               "must be 1-64 characters of a-z, A-Z, 0-9, _ and -");
  }
  out.name = name->as_string();
  if (const Json* d = function->find("description"); d != nullptr && d->is_string()) {
    out.description = d->as_string();
  }
  if (const Json* p = function->find("parameters"); p != nullptr && !p->is_null()) {
    if (!p->is_object())
      return bad(absl::StrCat(field, ".function.parameters"), "must be an object");
    out.parameters = *p;
  }
  return out;
}

absl::StatusOr<double> read_number(const Json& body, const char* key, double lo, double hi,
                                   std::optional<double>* out) {
  const Json* v = body.find(key);
  if (v == nullptr || v->is_null()) return 0.0;
  if (!v->is_number()) return bad(key, "must be a number");
  const double x = v->as_double();
  if (!(x >= lo && x <= hi)) return bad(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  *out = x;
  return x;
}

absl::StatusOr<int64_t> read_int(const Json& body, const char* key, int64_t lo, int64_t hi,
                                 int64_t fallback) {
  const Json* v = body.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_number() || !v->is_integer()) return bad(key, "must be an integer");
  const int64_t x = v->as_int();
  if (x < lo || x > hi) return bad(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  return x;
}

// Fields flywheel knows but does not implement: accepted at their neutral value only.
absl::Status check_neutral(const Json& body) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    const Json* v = body.find(key);
    if (v != nullptr && !v->is_null() && !(v->is_number() && v->as_double() == 0)) {
      return bad(key, "is not implemented; only 0 is accepted");
    }
  }
  if (const Json* v = body.find("logit_bias");
      v != nullptr && !v->is_null() && !(v->is_object() && v->as_object().empty())) {
    return bad("logit_bias", "is not implemented; only an empty object is accepted");
  }
  if (const Json* v = body.find("response_format"); v != nullptr && !v->is_null()) {
    const Json* type = v->is_object() ? v->find("type") : nullptr;
    if (type == nullptr || !type->is_string() || type->as_string() != "text") {
      return bad("response_format", "only {\"type\": \"text\"} is implemented");
    }
  }
  if (const Json* v = body.find("echo");
      v != nullptr && !v->is_null() && !(v->is_bool() && !v->as_bool())) {
    return bad("echo", "is not implemented; only false is accepted");
  }
  if (const Json* v = body.find("suffix");
      v != nullptr && !v->is_null() && !(v->is_string() && v->as_string().empty())) {
    return bad("suffix", "is not implemented");
  }
  if (const Json* v = body.find("best_of");
      v != nullptr && !v->is_null() && !(v->is_number() && v->as_double() == 1)) {
    return bad("best_of", "is not implemented; only 1 is accepted");
  }
  return absl::OkStatus();
}

// The fields both endpoints share.
absl::Status read_common(const Json& body, CompletionRequest* out) {
  if (const Json* model = body.find("model"); model != nullptr && !model->is_null()) {
    if (!model->is_string()) return bad("model", "must be a string");
    out->model = model->as_string();
  }
  absl::Status s = check_neutral(body);
  if (!s.ok()) return s;
  if (absl::StatusOr<double> t = read_number(body, "temperature", 0, 2, &out->temperature);
      !t.ok()) {
    return t.status();
  }
  if (absl::StatusOr<double> p = read_number(body, "top_p", 0, 1, &out->top_p); !p.ok()) {
    return p.status();
  }
  if (out->top_p && *out->top_p == 0) return bad("top_p", "must be above 0");
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    absl::StatusOr<int64_t> v = read_int(body, key, 1, int64_t{1} << 30, -1);
    if (!v.ok()) return v.status();
    if (*v > 0) out->max_tokens = *v;
  }
  if (const Json* stop = body.find("stop"); stop != nullptr && !stop->is_null()) {
    if (stop->is_string()) {
      out->stop.push_back(stop->as_string());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->as_array().size(); ++i) {
        const Json& item = stop->as_array()[i];
        if (!item.is_string()) return bad(absl::StrCat("stop[", i, "]"), "must be a string");
        out->stop.push_back(item.as_string());
      }
    } else {
      return bad("stop", "must be a string or a list of strings");
    }
    if (static_cast<int64_t>(out->stop.size()) > kMaxStops) {
      return bad("stop", absl::StrCat("at most ", kMaxStops, " stop sequences"));
    }
    for (const std::string& s : out->stop) {
      if (s.empty()) return bad("stop", "stop sequences must not be empty");
    }
  }
  absl::StatusOr<int64_t> n = read_int(body, "n", 1, kMaxChoices, 1);
  if (!n.ok()) return n.status();
  out->n = *n;
  if (const Json* seed = body.find("seed"); seed != nullptr && !seed->is_null()) {
    if (!seed->is_number() || !seed->is_integer()) return bad("seed", "must be an integer");
    out->seed = static_cast<uint64_t>(seed->as_int());
  }
  if (const Json* stream = body.find("stream"); stream != nullptr && !stream->is_null()) {
    if (!stream->is_bool()) return bad("stream", "must be a boolean");
    out->stream = stream->as_bool();
  }
  if (const Json* options = body.find("stream_options");
      options != nullptr && !options->is_null()) {
    if (!options->is_object()) return bad("stream_options", "must be an object");
    if (const Json* usage = options->find("include_usage"); usage != nullptr && !usage->is_null()) {
      if (!usage->is_bool()) return bad("stream_options.include_usage", "must be a boolean");
      out->include_usage = usage->as_bool();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompletionRequest> parse_chat_request(const Json& body) {
  if (!body.is_object()) return bad("body", "must be a JSON object");
  CompletionRequest out;
  out.chat = true;
  const Json* messages = body.find("messages");
  if (messages == nullptr || !messages->is_array() || messages->as_array().empty()) {
    return bad("messages", "must be a non-empty list");
  }
  for (size_t i = 0; i < messages->as_array().size(); ++i) {
    absl::StatusOr<AgentMessage> m =
        read_message(messages->as_array()[i], absl::StrCat("messages[", i, "]"));
    if (!m.ok()) return m.status();
    out.messages.push_back(*std::move(m));
  }
  if (const Json* tools = body.find("tools"); tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return bad("tools", "must be a list");
    for (size_t i = 0; i < tools->as_array().size(); ++i) {
      absl::StatusOr<ToolSpec> tool =
          read_tool(tools->as_array()[i], absl::StrCat("tools[", i, "]"));
      if (!tool.ok()) return tool.status();
      for (const ToolSpec& earlier : out.tools) {
        if (earlier.name == tool->name) {
          return bad(absl::StrCat("tools[", i, "].function.name"),
                     absl::StrCat("'", tool->name, "' is listed twice"));
        }
      }
      out.tools.push_back(*std::move(tool));
    }
  }
  if (const Json* choice = body.find("tool_choice"); choice != nullptr && !choice->is_null()) {
    if (!choice->is_string() || (choice->as_string() != "auto" && choice->as_string() != "none")) {
      return bad("tool_choice",
                 "only \"auto\" and \"none\" are implemented (\"required\" and a named function "
                 "need constrained decoding)");
    }
    out.parse_tools = choice->as_string() == "auto";
  }
  absl::Status s = read_common(body, &out);
  if (!s.ok()) return s;
  if (const Json* logprobs = body.find("logprobs"); logprobs != nullptr && !logprobs->is_null()) {
    if (!logprobs->is_bool()) return bad("logprobs", "must be a boolean");
    out.logprobs = logprobs->as_bool();
  }
  absl::StatusOr<int64_t> top = read_int(body, "top_logprobs", 0, kMaxTopLogprobs, 0);
  if (!top.ok()) return top.status();
  if (*top > 0 && !out.logprobs) return bad("top_logprobs", "needs logprobs: true");
  out.top_logprobs = *top;
  return out;
}

absl::StatusOr<CompletionRequest> parse_completion_request(const Json& body) {
  if (!body.is_object()) return bad("body", "must be a JSON object");
  CompletionRequest out;
  out.chat = false;
  const Json* prompt = body.find("prompt");
  if (prompt == nullptr) return bad("prompt", "missing");
  if (prompt->is_array() && prompt->as_array().size() == 1 && prompt->as_array()[0].is_string()) {
    prompt = &prompt->as_array()[0];
  }
  if (prompt->is_string()) {
    if (prompt->as_string().empty()) return bad("prompt", "must not be empty");
    out.prompt = prompt->as_string();
  } else if (prompt->is_array() && !prompt->as_array().empty()) {
    for (size_t i = 0; i < prompt->as_array().size(); ++i) {
      const Json& id = prompt->as_array()[i];
      if (!id.is_number() || !id.is_integer() || id.as_int() < 0) {
        return bad(absl::StrCat("prompt[", i, "]"),
                   "a prompt is a string, a list of one string, or a list of token ids");
      }
      out.prompt_ids.push_back(id.as_int());
    }
    out.prompt_is_ids = true;
  } else {
    return bad("prompt", "a prompt is a string, a list of one string, or a list of token ids");
  }
  absl::Status s = read_common(body, &out);
  if (!s.ok()) return s;
  if (!out.max_tokens) out.max_tokens = 16;  // OpenAI's default for completions
  absl::StatusOr<int64_t> top = read_int(body, "logprobs", 0, 5, 0);
  if (!top.ok()) return top.status();
  out.logprobs = body.find("logprobs") != nullptr && !body.find("logprobs")->is_null();
  out.top_logprobs = *top;
  return out;
}

}  // namespace flywheel::rollout::agent
