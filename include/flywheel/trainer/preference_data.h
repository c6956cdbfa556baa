// Preference pairs from JSONL, one pair per line:
//   {"prompt": "2+2=", "chosen": "4", "rejected": "5"}
//   {"prompt": [{"role": "user", "content": "..."}], "chosen": [{"role": "assistant", ...}],
//    "rejected": [...]}                   (TRL's conversational form: the prompt is rendered with
//                                          the chat template; each response is its one message)
//   {"prompt_ids": [...], "chosen_ids": [...], "rejected_ids": [...]}   (token ids as they are)
// The keys are configurable (data.prompt_key, chosen_key, rejected_key). Optional:
// "ref_chosen_logps" and "ref_rejected_logps" (the reference's summed log-probs, precomputed),
// an answer (data.answer_key) for exact-match accuracy of greedy completions, and a margin
// (data.margin_key: by how much a reward model should rank chosen above rejected).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/trainer/dpo_trainer.h"

namespace flywheel::trainer {

struct PreferenceData {
  std::vector<PreferenceExample> pairs;  // responses end with the eos id, when the model has one
  int64_t skipped_too_long = 0;          // prompt + the longer response over max_tokens
  int64_t with_reference = 0;            // pairs whose reference log-probs the record carries
  int64_t with_answer = 0;               // records with an answer (answer_key)
};

struct PreferenceDataOptions {
  std::string prompt_key = "prompt", chosen_key = "chosen", rejected_key = "rejected";
  std::string answer_key = "answer";
  std::string margin_key = "margin";  // a pair's margin (reward models); 0 when absent
  int64_t max_tokens = 4096;  // prompt + the longer response; longer pairs are skipped, counted
  int64_t eos_id = -1;        // appended to every response given as text; -1 = none
  int64_t vocab_size = 0;     // every id must be below it

  // data.prompt_key, answer_key, chosen_key, rejected_key, margin_key and model.max_seq_len of
  // `config`.
  static PreferenceDataOptions from_config(const core::Config& config, int64_t vocab_size);
};

// Reads and tokenizes `path`. InvalidArgument naming path:line for a malformed record (a missing
// or empty field, ids outside the vocabulary, a conversational prompt without a chat template,
// only one of the two reference log-probs); NotFound for an unreadable file; InvalidArgument
// when no pair is left.
absl::StatusOr<PreferenceData> load_preference_data(const std::string& path,
                                                    const PreferenceDataOptions& options,
                                                    const model::Tokenizer& tokenizer,
                                                    const model::ChatTemplate* chat_template);

}  // namespace flywheel::trainer
