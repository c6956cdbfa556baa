#include "flywheel/core/options/tokenizer_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<TokenizerType>> choice_names(TokenizerType) {
  static constexpr ChoiceName<TokenizerType> kNames[] = {
      {TokenizerType::kAuto, "auto"}, {TokenizerType::kHf, "hf"}, {TokenizerType::kChar, "char"}};
  return kNames;
}

absl::Span<const ChoiceName<ChatTemplateChoice>> choice_names(ChatTemplateChoice) {
  static constexpr ChoiceName<ChatTemplateChoice> kNames[] = {
      {ChatTemplateChoice::kAuto, "auto"},
      {ChatTemplateChoice::kChatml, "chatml"},
      {ChatTemplateChoice::kQwen3, "qwen3"},
      {ChatTemplateChoice::kLlama3, "llama3"},
      {ChatTemplateChoice::kNone, "none"}};
  return kNames;
}

void bind_options(FieldBinder& b, TokenizerOptions& o) {
  b.field("path", &o.path,
          FieldInfo("Directory with tokenizer.json / tokenizer_config.json. Empty: model.path."));
  b.choice("type", &o.type,
           FieldInfo("hf: Hugging Face byte-level BPE (tokenizer.json); char: the built-in "
                     "character tokenizer of the toy tasks; auto: hf when tokenizer.json exists."));
  b.choice("chat_template", &o.chat_template,
           FieldInfo("Template for `messages` prompts; auto detects it from tokenizer_config.json "
                     "and fails if the template is unknown."));
}

}  // namespace flywheel::core
