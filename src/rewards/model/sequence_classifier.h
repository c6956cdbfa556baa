// A Hugging Face *ForSequenceClassification checkpoint with one label: the decoder plus the
// bias-free "score.weight" [1, hidden] head, read at each row's last non-padding token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"

namespace flywheel::rewards {

class SequenceClassifier {
 public:
  // Reads <dir>/config.json and the weights. Errors name the directory or file (see
  // RewardModel::create).
  static absl::StatusOr<std::unique_ptr<SequenceClassifier>> load(
      const std::string& dir, const model::DecoderOptions& options);

  const model::DecoderModel& decoder() const { return *decoder_; }
  const model::ModelConfig& config() const { return decoder_->config(); }
  std::optional<int64_t> pad_token_id() const { return pad_token_id_; }

  // The head's output (float32) for each row of token ids (each non-empty, ids < vocab_size),
  // in one forward pass with rows right-padded to the longest. Throws c10::Error /
  // std::bad_alloc (the caller converts them). Not thread-safe with itself by contract (the
  // caller holds a lock): concurrent passes would only fight over the intra-op threads.
  std::vector<double> scores(const std::vector<const std::vector<int64_t>*>& rows) const;

  // Index of the token transformers reads in `ids`: the last one that is not pad_token_id
  // (0 when every token is padding; the last one when the config has no pad_token_id).
  int64_t read_position(const std::vector<int64_t>& ids) const;

 private:
  SequenceClassifier() = default;

  std::unique_ptr<model::DecoderModel> decoder_;
  at::Tensor score_weight_;  // [1, hidden], model dtype and device
  std::optional<int64_t> pad_token_id_;
};

}  // namespace flywheel::rewards
