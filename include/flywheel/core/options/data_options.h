// `data:` — the prompt dataset the controller hands out under leases.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct DataOptions {
  std::string train_path;  // JSONL prompts: {"prompt": ...} or {"messages": [...]}, "answer"
  std::string eval_path;   // optional JSONL for evaluation; "" = none
  std::string prompt_key = "prompt";
  std::string messages_key = "messages";
  std::string answer_key = "answer";
  std::string chosen_key = "chosen", rejected_key = "rejected";  // preference pairs (dpo, rm)
  std::string margin_key = "margin";                             // rm: a pair's margin (optional)
  bool shuffle = true;                                           // reshuffle every epoch
  int64_t seed = 1;                                              // shuffle seed
  int64_t epochs = 1;                                            // passes over the dataset
  int64_t max_prompt_tokens = 1024;  // longer prompts are skipped and counted
};

void bind_options(FieldBinder& b, DataOptions& o);

}  // namespace flywheel::core
