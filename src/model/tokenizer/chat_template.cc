#include "flywheel/model/tokenizer/chat_template.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"

namespace flywheel::model {
namespace {

constexpr const char* kHowToChoose =
    "set tokenizer.chat_template to chatml or llama3 if the model uses one of those formats, or "
    "to none and pass prompts as text or token ids";

// Jinja's `trim`: strip leading and trailing whitespace.
std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t\n\r\f\v");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(begin, end - begin + 1);
}

std::string strip_chars(const std::string& s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && s[begin] == '\n') ++begin;
  }
  if (right) {
    while (end > begin && s[end - 1] == '\n') --end;
  }
  return s.substr(begin, end - begin);
}

}  // namespace

std::string ChatTemplate::render_qwen3(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  // Qwen3's template: reasoning (<think>...</think>) is kept only for assistant turns after the
  // last user query; the final assistant turn always shows a (possibly empty) think block.
  int64_t last_query = static_cast<int64_t>(messages.size()) - 1;
  for (int64_t i = last_query; i >= 0; --i) {
    const std::string& c = messages[i].content;
    const bool tool_response =
        absl::StartsWith(c, "<tool_response>") && absl::EndsWith(c, "</tool_response>");
    if (messages[i].role == "user" && !tool_response) {
      last_query = i;
      break;
    }
  }
  std::string out;
  if (messages[0].role == "system") {
    absl::StrAppend(&out, "<|im_start|>system\n", messages[0].content, "<|im_end|>\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      size_t close = m.content.rfind("</think>");
      if (close != std::string::npos) {
        content = strip_chars(m.content.substr(close + 8), true, false);
        std::string before =
            strip_chars(m.content.substr(0, m.content.find("</think>")), false, true);
        size_t open = before.rfind("<think>");
        reasoning =
            strip_chars(open == std::string::npos ? before : before.substr(open + 7), true, false);
      }
      const bool last = i + 1 == messages.size();
      if (static_cast<int64_t>(i) > last_query && (last || !reasoning.empty())) {
        absl::StrAppend(&out, "<|im_start|>assistant\n<think>\n",
                        strip_chars(reasoning, true, true), "\n</think>\n\n",
                        strip_chars(content, true, false));
      } else {
        absl::StrAppend(&out, "<|im_start|>assistant\n", content);
      }
      out += "<|im_end|>\n";
    }
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::by_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate("chatml", "", "");
  if (name == "qwen3") return ChatTemplate("qwen3", "", "");
  if (name == "llama3") return ChatTemplate("llama3", "", "<|begin_of_text|>");
  return absl::InvalidArgumentError(
      absl::StrCat("no chat template '", name, "'; known templates: chatml, qwen3, llama3"));
}

absl::StatusOr<ChatTemplate> ChatTemplate::detect(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  absl::StatusOr<core::Json> config = core::read_json_file(path);
  if (absl::IsNotFound(config.status())) {
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "' to detect the chat template; ", kHowToChoose));
  }
  if (!config.ok()) return config.status();
  const core::Json* tmpl = config->find("chat_template");
  if (tmpl == nullptr || !tmpl->is_string()) {
    return absl::NotFoundError(absl::StrCat(path, " has no chat_template; ", kHowToChoose));
  }
  const std::string& t = tmpl->as_string();
  if (absl::StrContains(t, "<|im_start|>") && absl::StrContains(t, "<|im_end|>")) {
    if (absl::StrContains(t, "<think>")) return ChatTemplate("qwen3", "", "");
    // Qwen2 and Qwen2.5 add a default system prompt when the conversation has none.
    for (const char* system :
         {"You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
          "You are a helpful assistant."}) {
      if (absl::StrContains(t, absl::StrCat("<|im_start|>system\\n", system)) ||
          absl::StrContains(t, absl::StrCat("<|im_start|>system\n", system))) {
        return ChatTemplate("chatml", system, "");
      }
    }
    return ChatTemplate("chatml", "", "");
  }
  if (absl::StrContains(t, "<|start_header_id|>") && absl::StrContains(t, "<|eot_id|>")) {
    if (absl::StrContains(t, "Cutting Knowledge Date")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path,
          ": the Llama 3.1+ chat template (with its date preamble and tool prompts) is not "
          "supported natively; ",
          kHowToChoose));
    }
    std::string bos = "<|begin_of_text|>";
    if (const core::Json* b = config->find("bos_token"); b && b->is_string()) bos = b->as_string();
    return ChatTemplate("llama3", "", bos);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": chat template not recognised by flywheel; ", kHowToChoose));
}

absl::StatusOr<ChatTemplate> ChatTemplate::resolve(const std::string& name,
                                                   const std::string& dir) {
  if (name == "auto") return detect(dir);
  return by_name(name);
}

absl::StatusOr<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) const {
  if (messages.empty()) return absl::InvalidArgumentError("a chat needs at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("message ", i, ": unsupported role '", role,
                                                     "'; supported: system, user, assistant"));
    }
  }
  std::string out;
  if (name_ == "qwen3") return render_qwen3(messages, add_generation_prompt);
  if (name_ == "chatml") {
    if (!default_system_.empty() && messages[0].role != "system") {
      absl::StrAppend(&out, "<|im_start|>system\n", default_system_, "<|im_end|>\n");
    }
    for (const ChatMessage& m : messages) {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  out = bos_;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", trim(m.content),
                    "<|eot_id|>");
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

TurnMarkers ChatTemplate::turn_markers() const {
  if (name_ == "llama3") {
    return {"<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\n",
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"};
  }
  return {"<|im_end|>", "\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"};
}

}  // namespace flywheel::model
