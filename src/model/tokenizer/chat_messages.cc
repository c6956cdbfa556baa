#include "flywheel/model/tokenizer/chat_messages.h"

#include "absl/strings/str_cat.h"

namespace flywheel::model {

absl::StatusOr<std::vector<ChatMessage>> parse_messages(const core::Json& list,
                                                        const std::string& where) {
  if (!list.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"messages\" must be a list"));
  }
  std::vector<ChatMessage> messages;
  for (const core::Json& m : list.as_array()) {
    const core::Json* role = m.find("role");
    const core::Json* content = m.find("content");
    if (!role || !role->is_string() || !content || !content->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": each message needs string \"role\" and \"content\""));
    }
    messages.push_back({role->as_string(), content->as_string()});
  }
  return messages;
}

}  // namespace flywheel::model
