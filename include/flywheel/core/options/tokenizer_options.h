// `tokenizer:` — how text becomes token ids and how chat messages are rendered.
#pragma once

#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// tokenizer.type (kAuto: hf when tokenizer.json exists, else char).
enum class TokenizerType { kAuto, kHf, kChar };
absl::Span<const ChoiceName<TokenizerType>> choice_names(TokenizerType);

// tokenizer.chat_template: a built-in template by name, auto (detected), or none.
enum class ChatTemplateChoice { kAuto, kChatml, kQwen3, kLlama3, kNone };
absl::Span<const ChoiceName<ChatTemplateChoice>> choice_names(ChatTemplateChoice);

struct TokenizerOptions {
  std::string path;  // directory with tokenizer.json; "" = model.path
  TokenizerType type = TokenizerType::kAuto;
  ChatTemplateChoice chat_template = ChatTemplateChoice::kAuto;
};

void bind_options(FieldBinder& b, TokenizerOptions& o);

}  // namespace flywheel::core
