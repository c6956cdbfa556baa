#include "flywheel/rollout/worker/prompt_encoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/model/tokenizer/chat_messages.h"

namespace flywheel::rollout {

PromptEncoder::PromptEncoder(const model::TokenizerSetup& tokenizers, const core::DataOptions& data,
                             int64_t vocab_size)
    : tokenizers_(tokenizers), data_(data), vocab_size_(vocab_size) {}

absl::StatusOr<EncodedPrompt> PromptEncoder::encode(const std::string& line,
                                                    const std::string& where) const {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
  };
  absl::StatusOr<core::Json> parsed = core::Json::parse(line);
  if (!parsed.ok()) return bad(parsed.status().message());
  if (!parsed->is_object()) return bad("a prompt record must be a JSON object");
  EncodedPrompt out;
  model::EncodeOptions encode;
  if (const core::Json* messages = parsed->find(data_.messages_key)) {
    if (!tokenizers_.chat_template) {
      return bad(absl::StrCat("\"", data_.messages_key,
                              "\" records need a chat template (tokenizer.chat_template)"));
    }
    absl::StatusOr<std::vector<model::ChatMessage>> chat = model::parse_messages(*messages, where);
    if (!chat.ok()) return chat.status();
    absl::StatusOr<std::string> rendered = tokenizers_.chat_template->render(*chat, true);
    if (!rendered.ok()) return bad(rendered.status().message());
    out.text = std::move(*rendered);
    encode.add_special_tokens = false;  // the rendered chat carries its own
  } else {
    const core::Json* prompt = parsed->find(data_.prompt_key);
    if (prompt == nullptr || !prompt->is_string()) {
      return bad(absl::StrCat("expected a string \"", data_.prompt_key, "\" or a list \"",
                              data_.messages_key, "\""));
    }
    out.text = prompt->as_string();
  }
  absl::StatusOr<std::vector<int64_t>> ids = tokenizers_.tokenizer->encode(out.text, encode);
  if (!ids.ok()) return bad(ids.status().message());
  if (ids->empty()) return bad("the prompt is empty");
  for (int64_t id : *ids) {
    if (id < 0 || id >= vocab_size_) {
      return bad(absl::StrCat("the tokenizer gives id ", id, ", outside the model's vocabulary"));
    }
  }
  out.ids = std::move(*ids);
  out.record = std::make_shared<const core::Json>(std::move(*parsed));
  return out;
}

}  // namespace flywheel::rollout
