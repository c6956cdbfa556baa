// Turns a dataset line ({"prompt": "..."} or {"messages": [...]}) into the prompt text rewards
// see and the token ids the engine generates from: chat records are rendered with the chat
// template (with the assistant's generation prompt), plain prompts get the tokenizer's special
// tokens. Also loads the tokenizer and chat template a config names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/core/json.h"
#include "flywheel/model/chat_template.h"
#include "flywheel/model/tokenizer.h"

namespace flywheel::cli {

struct TokenizerSetup {
  std::string dir;  // tokenizer.path, or model.path when unset
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::optional<model::ChatTemplate> chat_template;  // none for tokenizer.chat_template: none
};

// The tokenizer and chat template of `config`. A template named explicitly must resolve; "auto"
// falls back to none when the model has no template.
absl::StatusOr<TokenizerSetup> load_tokenizer_setup(const core::Config& config);

struct EncodedPrompt {
  std::shared_ptr<const core::Json> record;  // the parsed line
  std::string text;                          // the prompt as rendered
  std::vector<int64_t> ids;
};

class PromptEncoder {
 public:
  // `tokenizers` must outlive the encoder.
  PromptEncoder(const TokenizerSetup& tokenizers, const core::DataOptions& data,
                int64_t vocab_size);
  // InvalidArgument naming `where`: malformed JSON, no string prompt or message list, text the
  // tokenizer refuses, ids outside the vocabulary, an empty prompt.
  absl::StatusOr<EncodedPrompt> encode(const std::string& line, const std::string& where) const;

 private:
  const TokenizerSetup& tokenizers_;
  core::DataOptions data_;
  int64_t vocab_size_;
};

}  // namespace flywheel::cli
