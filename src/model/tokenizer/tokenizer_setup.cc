#include "flywheel/model/tokenizer/tokenizer_setup.h"
#include "flywheel/core/status_macros.h"

#include <utility>

namespace flywheel::model {

absl::StatusOr<TokenizerSetup> load_tokenizer_setup(const core::TokenizerOptions& options,
                                                    const std::string& model_path) {
  TokenizerSetup setup;
  setup.dir = options.path.empty() ? model_path : options.path;
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                            load_tokenizer(setup.dir, options.type));
  setup.tokenizer = std::move(tokenizer);
  if (options.chat_template != core::ChatTemplateChoice::kNone) {
    absl::StatusOr<ChatTemplate> resolved =
        ChatTemplate::resolve(std::string(core::choice_name(options.chat_template)), setup.dir);
    if (resolved.ok()) {
      setup.chat_template = *resolved;
    } else if (options.chat_template != core::ChatTemplateChoice::kAuto) {
      return resolved.status();  // asked for by name: say why it is unavailable
    }
  }
  return setup;
}

}  // namespace flywheel::model
