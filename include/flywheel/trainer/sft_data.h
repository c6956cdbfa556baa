// SFT records from JSONL: {"prompt": ..., "response": ...} (the response key is configurable) or
// {"messages": [...]} (the last message, an assistant turn, is the response; the others are
// rendered with the chat template as the prompt). An optional answer (data.answer_key) is kept
// for exact-match accuracy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/trainer/sft_trainer.h"

namespace flywheel::trainer {

struct SftRecord {
  SftExample example;  // response ids end with the eos id, when the model has one
  std::string answer;  // "" when the record has none
  bool has_answer = false;
  // With SftDataOptions::keep_records: the prompt as rendered before tokenizing, the JSONL
  // object (what reward functions read), and path:line.
  std::string prompt_text;
  std::shared_ptr<const core::Json> record;
  std::string where;
};

struct SftData {
  std::vector<SftRecord> records;
  int64_t skipped_too_long = 0;  // prompt + response over model.max_seq_len
};

struct SftDataOptions {
  std::string prompt_key = "prompt", messages_key = "messages", response_key = "response";
  std::string answer_key = "answer";
  int64_t max_tokens = 4096;  // prompt + response; longer records are skipped and counted
  int64_t eos_id = -1;        // appended to every response; -1 = none
  int64_t vocab_size = 0;     // every id must be below it
  // false: a plain record may lack the response (held-out prompts with only an answer).
  bool require_response = true;
  bool keep_records = false;  // keep each record's JSON and prompt text (held-out evaluation)

  // The record keys (data.prompt_key, messages_key, answer_key, sft.response_key) and
  // model.max_seq_len of `config`, for a model with `vocab_size` ids.
  static SftDataOptions from_config(const core::Config& config, int64_t vocab_size);
};

// `text`'s ids (with the tokenizer's special tokens when `special`). InvalidArgument for an id
// outside [0, vocab_size).
absl::StatusOr<std::vector<int32_t>> encode_in_vocabulary(const model::Tokenizer& tokenizer,
                                                          const std::string& text, bool special,
                                                          int64_t vocab_size);

// Reads and tokenizes `path`. InvalidArgument naming path:line for a malformed record, ids
// outside the vocabulary, or a chat whose last message is not the assistant's; NotFound for an
// unreadable file; InvalidArgument when no record is left.
absl::StatusOr<SftData> load_sft_data(const std::string& path, const SftDataOptions& options,
                                      const model::Tokenizer& tokenizer,
                                      const model::ChatTemplate* chat_template);

// Where the next SFT batch starts: epoch and position in that epoch's order (shuffled per epoch
// when asked, from the seed and the epoch).
struct SftCursor {
  int64_t epoch = 0, position = 0;
};

// The cursor and the number of records it walks, as checkpoint scalars (data_epoch,
// data_position, data_records).
void save_cursor(const SftCursor& cursor, int64_t records, std::map<std::string, double>* scalars);
// The cursor of a checkpoint's scalars (zero when they have none). FailedPrecondition when the
// checkpoint `from` walked another number of records.
absl::StatusOr<SftCursor> restore_cursor(const std::map<std::string, double>& scalars,
                                         int64_t records, const std::string& from);

struct SftBatchOptions {
  int64_t batch_size = 1;  // sft.batch_size: records per step, over all ranks
  bool shuffle = true;     // data.shuffle
  uint64_t seed = 0;       // data.seed
};

// The indices of the records of one step (batch_size of them, across epochs of `records`; the
// cursor moves on) that are this rank's share: the j-th record of the step goes to rank
// j % world.
std::vector<int64_t> next_batch_indices(int64_t records, SftCursor* cursor,
                                        const SftBatchOptions& options, int rank, int world);

// The records of one step (batch_size of them, across epochs; the cursor moves on), and of
// those this rank's share: the j-th record of the step goes to rank j % world.
std::vector<const SftExample*> next_sft_batch(const SftData& data, SftCursor* cursor,
                                              const SftBatchOptions& options, int rank, int world);

// Every record's example whose index is rank modulo world (a held-out set split over ranks).
std::vector<const SftExample*> rank_share(const SftData& data, int rank, int world);

}  // namespace flywheel::trainer
