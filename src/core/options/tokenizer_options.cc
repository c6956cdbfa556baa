#include "flywheel/core/options/tokenizer_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, TokenizerOptions& o) {
  b.field("path", &o.path,
          FieldInfo("Directory with tokenizer.json / tokenizer_config.json. Empty: model.path."));
  b.field("type", &o.type,
          FieldInfo("hf: Hugging Face byte-level BPE (tokenizer.json); char: the built-in "
                    "character tokenizer of the toy tasks; auto: hf when tokenizer.json exists.")
              .one_of({"auto", "hf", "char"}));
  b.field("chat_template", &o.chat_template,
          FieldInfo("Template for `messages` prompts; auto detects it from tokenizer_config.json "
                    "and fails if the template is unknown.")
              .one_of({"auto", "chatml", "qwen3", "llama3", "none"}));
}

}  // namespace flywheel::core
