#include "flywheel/core/options/data_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, DataOptions& o) {
  b.field("train_path", &o.train_path,
          FieldInfo("JSONL prompt file: one object per line with a prompt (or messages), an "
                    "answer and any metadata."));
  b.field("eval_path", &o.eval_path, FieldInfo("JSONL prompts for evaluation. Empty: none."));
  b.field("prompt_key", &o.prompt_key, FieldInfo("Key of the prompt text in each line."));
  b.field("messages_key", &o.messages_key,
          FieldInfo("Key of a chat message list, rendered with tokenizer.chat_template."));
  b.field("answer_key", &o.answer_key, FieldInfo("Key of the reference answer for rewards."));
  b.field("chosen_key", &o.chosen_key,
          FieldInfo("Key of the preferred response of a preference pair (flywheel dpo, rm)."));
  b.field("rejected_key", &o.rejected_key,
          FieldInfo("Key of the dispreferred response of a preference pair (flywheel dpo, rm)."));
  b.field("margin_key", &o.margin_key,
          FieldInfo("Key of a preference pair's margin, by how much the chosen reward should "
                    "exceed the rejected one (flywheel rm; optional, 0 when absent)."));
  b.field("shuffle", &o.shuffle, FieldInfo("Reshuffle the prompts at every epoch."));
  b.field("seed", &o.seed, FieldInfo("Shuffle seed.").min(0));
  b.field("epochs", &o.epochs, FieldInfo("Passes over the dataset.").min(1));
  b.field("max_prompt_tokens", &o.max_prompt_tokens,
          FieldInfo("Prompts longer than this are skipped (and counted).").min(1));
}

}  // namespace flywheel::core
