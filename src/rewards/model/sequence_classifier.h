// A Hugging Face *ForSequenceClassification checkpoint with one label: the decoder plus the
// bias-free "score.weight" [1, hidden] head, read at each row's last non-padding token. Or a
// *ForTokenClassification checkpoint with one label (a process reward model): the same head with
// an optional "score.bias" [1], read at any token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::rewards {

class SequenceClassifier {
 public:
  enum class Head { kSequence, kToken };

  // Reads <dir>/config.json and the weights. Errors name the directory or file (see
  // RewardModel::create).
  static absl::StatusOr<std::unique_ptr<SequenceClassifier>> load(
      const std::string& dir, const model::DecoderOptions& options, Head head = Head::kSequence);

  const model::DecoderModel& decoder() const { return *decoder_; }
  const model::ModelConfig& config() const { return decoder_->config(); }
  std::optional<int64_t> pad_token_id() const { return pad_token_id_; }

  // The head's output (float32) for each row of token ids (each non-empty, ids < vocab_size),
  // in one forward pass with rows right-padded to the longest. Throws c10::Error /
  // std::bad_alloc (the caller converts them). Not thread-safe with itself by contract (the
  // caller holds a lock): concurrent passes would only fight over the intra-op threads.
  std::vector<double> scores(const std::vector<const std::vector<int64_t>*>& rows) const;
  // The head's output (bias included) at positions read[b] of each row, one forward pass as
  // scores(). Same contract.
  std::vector<std::vector<double>> values_at(const std::vector<const std::vector<int64_t>*>& rows,
                                             const std::vector<std::vector<int64_t>>& read) const;

  // Index of the token transformers reads in `ids`: the last one that is not pad_token_id
  // (0 when every token is padding; the last one when the config has no pad_token_id).
  int64_t read_position(const std::vector<int64_t>& ids) const;

 private:
  SequenceClassifier() = default;

  std::unique_ptr<model::DecoderModel> decoder_;
  at::Tensor score_weight_;  // [1, hidden], model dtype and device
  double score_bias_ = 0;    // a token classifier's "score.bias"
  std::optional<int64_t> pad_token_id_;
};

// A classifier with the tokenizer of its directory, as a reward function loads them.
struct ScoringModel {
  std::unique_ptr<SequenceClassifier> classifier;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

// Loads `dir` in `dtype` (float32 | bfloat16 | float16) on `device` (cpu | cuda | cuda:<index>),
// options of the reward `reward`, which starts its errors; other errors name the directory.
absl::StatusOr<ScoringModel> load_scoring_model(const std::string& dir, const std::string& dtype,
                                                const std::string& device,
                                                SequenceClassifier::Head head,
                                                const std::string& reward);

}  // namespace flywheel::rewards
