// The input side of `flywheel generate`: prompt records read and tokenized, and key=value
// flags.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::cli {

// Where a record's text is tokenized for: the model directory (its tokenizer and template).
struct PromptSource {
  std::string model_dir;
  std::string chat_template = "auto";  // for "messages"
};

// One input line: its record (absent when the line is not JSON) and, for a bad line, why.
struct InputLine {
  std::string where;  // path:line
  std::optional<core::Json> record;
  std::string error;
};

// The prompt ids of `record`, tokenizing "prompt" / "messages" when needed (the template is
// resolved on first use into *chat_template).
absl::StatusOr<std::vector<int64_t>> prompt_ids(const core::Json& record, const std::string& where,
                                                const model::Tokenizer* tokenizer,
                                                const PromptSource& source,
                                                std::optional<model::ChatTemplate>* chat_template);

// `flag`'s key=value items into *out; InvalidArgument naming an item without '='.
absl::Status parse_params(const std::vector<std::string>& items, const std::string& flag,
                          std::map<std::string, std::string>* out);

}  // namespace flywheel::cli
