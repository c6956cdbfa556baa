// {"messages": [{"role": ..., "content": ...}, ...]} lines of the CLI's JSONL inputs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"
#include "flywheel/model/chat_template.h"

namespace flywheel::cli {

// InvalidArgument naming `where` (e.g. "in.jsonl:3") for anything but a list of objects with
// string role and content.
absl::StatusOr<std::vector<model::ChatMessage>> parse_messages(const core::Json& list,
                                                               const std::string& where);

}  // namespace flywheel::cli
