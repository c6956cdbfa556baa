// Chat templates rendered natively: ChatML (Qwen2/Qwen2.5), Qwen3 and Llama 3.
//
// chatml:  <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
// qwen3:   chatml, but an assistant turn after the last user query is written
//          <think>\n{reasoning}\n</think>\n\n{answer} (reasoning taken from the content's
//          <think>...</think>, empty for the last turn when absent), and earlier assistant turns
//          lose their reasoning. Tools and enable_thinking=false are not rendered.
// llama3:  <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
//          ... [<|start_header_id|>assistant<|end_header_id|>\n\n]
// Detection reads tokenizer_config.json's chat_template and recognises the Qwen2/Qwen2.5/Qwen3
// ChatML templates (with Qwen2/Qwen2.5's default system prompts) and the Llama 3 template. Any
// other template is an error naming the ways to choose one; flywheel never falls back silently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::model {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// How an environment's reply sits between two assistant turns of an episode, as a user
// message: `end_of_turn` closes the assistant's turn when the model did not end it so (it
// stopped at a stop string such as "</calc>"), `open` starts the reply and `close` ends it and
// opens the next assistant turn. chatml / qwen3: "<|im_end|>", "\n<|im_start|>user\n",
// "<|im_end|>\n<|im_start|>assistant\n"; llama3 likewise with its headers and <|eot_id|>.
struct TurnMarkers {
  std::string end_of_turn;
  std::string open;
  std::string close;
};

class ChatTemplate {
 public:
  // "chatml", "qwen3" or "llama3"; "none" and anything else are InvalidArgument.
  static absl::StatusOr<ChatTemplate> by_name(const std::string& name);
  // From <dir>/tokenizer_config.json. NotFound when the file or its chat_template is missing;
  // InvalidArgument for a template flywheel does not recognise.
  static absl::StatusOr<ChatTemplate> detect(const std::string& dir);
  // `name` "auto" detects from `dir`; otherwise by_name(name).
  static absl::StatusOr<ChatTemplate> resolve(const std::string& name, const std::string& dir);

  const std::string& name() const { return name_; }
  const std::string& default_system() const { return default_system_; }

  // InvalidArgument for an unknown role or an empty message list.
  absl::StatusOr<std::string> render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt = true) const;
  TurnMarkers turn_markers() const;

 private:
  std::string render_qwen3(const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) const;
  ChatTemplate(std::string name, std::string default_system, std::string bos)
      : name_(std::move(name)), default_system_(std::move(default_system)), bos_(std::move(bos)) {}

  std::string name_;
  std::string default_system_;  // ChatML: inserted when the first message is not a system one
  std::string bos_;             // Llama 3: "<|begin_of_text|>"
};

}  // namespace flywheel::model
