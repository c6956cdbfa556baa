// {"messages": [{"role": ..., "content": ...}, ...]} of JSONL records (prompts, SFT data, chats).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/chat_template.h"

namespace flywheel::model {

// InvalidArgument naming `where` (e.g. "in.jsonl:3") for anything but a list of objects with
// string role and content.
absl::StatusOr<std::vector<ChatMessage>> parse_messages(const core::Json& list,
                                                        const std::string& where);

}  // namespace flywheel::model
