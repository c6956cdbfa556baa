// Turns a dataset line ({"prompt": "..."} or {"messages": [...]}) into the prompt text rewards
// see and the token ids the engine generates from: chat records are rendered with the chat
// template (with the assistant's generation prompt), plain prompts get the tokenizer's special
// tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"

namespace flywheel::rollout {

struct EncodedPrompt {
  std::shared_ptr<const core::Json> record;  // the parsed line
  std::string text;                          // the prompt as rendered
  std::vector<int64_t> ids;
};

class PromptEncoder {
 public:
  // `tokenizers` must outlive the encoder.
  PromptEncoder(const model::TokenizerSetup& tokenizers, const core::DataOptions& data,
                int64_t vocab_size);
  // InvalidArgument naming `where`: malformed JSON, no string prompt or message list, text the
  // tokenizer refuses, ids outside the vocabulary, an empty prompt.
  absl::StatusOr<EncodedPrompt> encode(const std::string& line, const std::string& where) const;

 private:
  const model::TokenizerSetup& tokenizers_;
  core::DataOptions data_;
  int64_t vocab_size_;
};

}  // namespace flywheel::rollout
