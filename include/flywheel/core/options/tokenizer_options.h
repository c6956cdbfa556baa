// `tokenizer:` — how text becomes token ids and how chat messages are rendered.
#pragma once

#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct TokenizerOptions {
  std::string path;                    // directory with tokenizer.json; "" = model.path
  std::string type = "auto";           // auto | hf | char
  std::string chat_template = "auto";  // auto | chatml | qwen3 | llama3 | none
};

void bind_options(FieldBinder& b, TokenizerOptions& o);

}  // namespace flywheel::core
