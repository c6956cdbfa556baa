// The tokenizer and chat template a config names (tokenizer: section), loaded together.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/options/tokenizer_options.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::model {

struct TokenizerSetup {
  std::string dir;  // tokenizer.path, or model.path when unset
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // none for tokenizer.chat_template: none
};

// The tokenizer of `options` (from tokenizer.path, else `model_path`) and its chat template. A
// template named explicitly must resolve; "auto" falls back to none when the model has none.
absl::StatusOr<TokenizerSetup> load_tokenizer_setup(const core::TokenizerOptions& options,
                                                    const std::string& model_path);

}  // namespace flywheel::model
