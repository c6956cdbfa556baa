#include "openai_response.h"

namespace flywheel::rollout::agent {
namespace {

using core::Json;

Json bytes_json(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(Json(static_cast<int64_t>(c)));
  return out;
}

Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json function = Json::object();
    function.set("name", calls[i].name);
    function.set("arguments", calls[i].arguments);
    Json call = Json::object();
    if (with_index) call.set("index", static_cast<int64_t>(i));
    call.set("id", calls[i].id);
    call.set("type", "function");
    call.set("function", std::move(function));
    out.push_back(std::move(call));
  }
  return out;
}

Json logprobs_json(const ChoiceOut& choice, bool chat) {
  if (chat) {
    Json content = Json::array();
    for (const TokenLogprob& t : choice.logprobs) {
      Json top = Json::array();
      for (const auto& [token, lp] : t.top) {
        Json item = Json::object();
        item.set("token", token);
        item.set("logprob", static_cast<double>(lp));
        item.set("bytes", bytes_json(token));
        top.push_back(std::move(item));
      }
      Json item = Json::object();
      item.set("token", t.token);
      item.set("logprob", static_cast<double>(t.logprob));
      item.set("bytes", bytes_json(t.token));
      item.set("top_logprobs", std::move(top));
      content.push_back(std::move(item));
    }
    Json out = Json::object();
    out.set("content", std::move(content));
    out.set("refusal", Json());
    return out;
  }
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
       offsets = Json::array();
  int64_t offset = 0;
  for (const TokenLogprob& t : choice.logprobs) {
    tokens.push_back(t.token);
    values.push_back(static_cast<double>(t.logprob));
    Json top = Json::object();
    for (const auto& [token, lp] : t.top) top.set(token, static_cast<double>(lp));
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.token.size());
  }
  Json out = Json::object();
  out.set("tokens", std::move(tokens));
  out.set("token_logprobs", std::move(values));
  out.set("top_logprobs", std::move(tops));
  out.set("text_offset", std::move(offsets));
  return out;
}

Json head_json(const ResponseHead& head, const char* object) {
  Json out = Json::object();
  out.set("id", head.id);
  out.set("object", object);
  out.set("created", head.created);
  out.set("model", head.model);
  return out;
}

}  // namespace

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  Json usage = Json::object();
  usage.set("prompt_tokens", prompt_tokens);
  usage.set("completion_tokens", completion_tokens);
  usage.set("total_tokens", prompt_tokens + completion_tokens);
  return usage;
}

Json message_json(const AgentMessage& message) {
  Json out = Json::object();
  out.set("role", "assistant");
  out.set("content",
          message.content.empty() && !message.tool_calls.empty() ? Json() : Json(message.content));
  if (!message.tool_calls.empty())
    out.set("tool_calls", tool_calls_json(message.tool_calls, false));
  return out;
}

Json response_json(const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                   int64_t prompt_tokens) {
  Json out = head_json(head, head.chat ? "chat.completion" : "text_completion");
  Json list = Json::array();
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOut& c = choices[i];
    Json choice = Json::object();
    choice.set("index", static_cast<int64_t>(i));
    if (head.chat) {
      choice.set("message", message_json(c.message));
    } else {
      choice.set("text", c.text);
    }
    choice.set("logprobs", head.logprobs ? logprobs_json(c, head.chat) : Json());
    choice.set("finish_reason", c.finish_reason);
    list.push_back(std::move(choice));
    completion_tokens += c.tokens;
  }
  out.set("choices", std::move(list));
  out.set("usage", usage_json(prompt_tokens, completion_tokens));
  return out;
}

Json chunk_json(const ResponseHead& head, int64_t index, const std::string& text, bool first,
                const ChoiceOut* final_choice) {
  Json out = head_json(head, head.chat ? "chat.completion.chunk" : "text_completion");
  Json choice = Json::object();
  choice.set("index", index);
  if (head.chat) {
    Json delta = Json::object();
    if (first) delta.set("role", "assistant");
    if (!text.empty() || final_choice == nullptr) delta.set("content", text);
    if (final_choice != nullptr && !final_choice->message.tool_calls.empty()) {
      delta.set("tool_calls", tool_calls_json(final_choice->message.tool_calls, true));
    }
    choice.set("delta", std::move(delta));
  } else {
    choice.set("text", text);
  }
  choice.set("logprobs", final_choice != nullptr && head.logprobs
                             ? logprobs_json(*final_choice, head.chat)
                             : Json());
  choice.set("finish_reason", final_choice != nullptr ? Json(final_choice->finish_reason) : Json());
  out.set("choices", Json::array({std::move(choice)}));
  return out;
}

Json usage_chunk_json(const ResponseHead& head, int64_t prompt_tokens, int64_t completion_tokens) {
  Json out = head_json(head, head.chat ? "chat.completion.chunk" : "text_completion");
  out.set("choices", Json::array());
  out.set("usage", usage_json(prompt_tokens, completion_tokens));
  return out;
}

}  // namespace flywheel::rollout::agent
