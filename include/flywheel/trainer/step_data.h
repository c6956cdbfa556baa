// Step-labelled completions for process reward models, from JSONL in TRL's stepwise-supervision
// form, one completion per line:
//   {"prompt": "12+34=", "completions": ["6", "4"], "labels": [true, false]}
// Each step is tokenized on its own with the separator appended (model::encode_steps), and its
// label (true / false, or 1 / 0) is read at its last token. The keys are configurable
// (data.prompt_key, rm.steps_key, rm.labels_key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::trainer {

struct StepExample {
  std::vector<int32_t> prompt;    // >= 1 token
  std::vector<int32_t> steps;     // every step's tokens, in order (>= 1)
  std::vector<int32_t> label_at;  // index in `steps` of each step's last token, increasing
  std::vector<float> labels;      // 1 = a correct step, 0 = a wrong one
};

struct StepData {
  std::vector<StepExample> examples;
  int64_t skipped_too_long = 0;  // prompt + steps over max_tokens
  int64_t steps = 0;             // labelled steps kept
  int64_t positive = 0;          // of which labelled correct
};

struct StepDataOptions {
  std::string prompt_key = "prompt", steps_key = "completions", labels_key = "labels";
  std::string separator = "\n";  // appended to every step ("" = none)
  int64_t max_tokens = 4096;     // longer records are skipped and counted
  int64_t vocab_size = 0;        // every id must be below it

  // data.prompt_key, rm.steps_key, rm.labels_key, rm.separator and model.max_seq_len.
  static StepDataOptions from_config(const core::Config& config, int64_t vocab_size);
};

// Reads and tokenizes `path`. InvalidArgument naming path:line for a malformed record (a
// missing key, steps and labels of different lengths, no step, an empty step, a label that is
// not a boolean or 0 / 1, ids outside the vocabulary); NotFound for an unreadable file;
// InvalidArgument when no record is left.
absl::StatusOr<StepData> load_step_data(const std::string& path, const StepDataOptions& options,
                                        const model::Tokenizer& tokenizer);

}  // namespace flywheel::trainer
