#include "generate_input.h"

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/chat_messages.h"

namespace flywheel::cli {

absl::StatusOr<std::vector<int64_t>> prompt_ids(const core::Json& record, const std::string& where,
                                                const model::Tokenizer* tokenizer,
                                                const PromptSource& source,
                                                std::optional<model::ChatTemplate>* chat_template) {
  std::vector<int64_t> ids;
  const core::Json* given = record.find("prompt_ids");
  const core::Json* prompt = record.find("prompt");
  const core::Json* messages = record.find("messages");
  if (given != nullptr && given->is_array()) {
    for (const core::Json& id : given->as_array()) {
      if (!id.is_integer()) return absl::InvalidArgumentError("prompt_ids must be integers");
      ids.push_back(id.as_int());
    }
    return ids;
  }
  if (!(prompt != nullptr && prompt->is_string()) && messages == nullptr) {
    return absl::InvalidArgumentError("expected \"prompt\", \"messages\" or \"prompt_ids\"");
  }
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("text prompts need a tokenizer (tokenizer.json or char_tokenizer.json) in ",
                     source.model_dir, "; use {\"prompt_ids\": [...]}"));
  }
  std::string text;
  model::EncodeOptions encode;
  if (messages != nullptr) {
    if (!*chat_template) {
      FLYWHEEL_ASSIGN_OR_RETURN(
          model::ChatTemplate resolved,
          model::ChatTemplate::resolve(source.chat_template, source.model_dir));
      *chat_template = resolved;
    }
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> chat,
                              model::parse_messages(*messages, where));
    FLYWHEEL_ASSIGN_OR_RETURN(std::string rendered, (*chat_template)->render(chat));
    text = rendered;
    encode.add_special_tokens = false;
  } else {
    text = prompt->as_string();
  }
  return tokenizer->encode(text, encode);
}

absl::Status parse_params(const std::vector<std::string>& items, const std::string& flag,
                          std::map<std::string, std::string>* out) {
  for (const std::string& kv : items) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " '", kv, "' is not key=value"));
    }
    (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return absl::OkStatus();
}

}  // namespace flywheel::cli
