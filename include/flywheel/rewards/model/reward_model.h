// reward_model: a learned outcome reward model. Scores prompt + completion with a Hugging Face
// sequence-classification checkpoint (Qwen2ForSequenceClassification,
// Qwen3ForSequenceClassification, LlamaForSequenceClassification): the decoder's weights under
// "model.", a bias-free "score.weight" [1, hidden] head and the tokenizer in the same directory.
// The score is the head's output at the last token that is not `pad_token_id` (as transformers
// reads it), optionally normalised by running mean/std and clipped.
//
// Lives in flywheel_reward_model (it links LibTorch); flywheel_rewards stays torch-free. The CLI
// adds it to the registry with register_reward_model().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::model {
class DecoderModel;
}  // namespace flywheel::model

namespace flywheel::rewards {

struct RewardModelOptions {
  static constexpr int64_t kModelMaxLength = 0;

  std::string path;        // the checkpoint directory (absolute, or made so by the parser)
  int64_t batch_size = 8;  // samples per forward pass; >= 1
  // Tokens per sample; a longer one loses tokens from its start (the prompt's beginning), keeping
  // a leading special token (BOS). kModelMaxLength = the model's max_position_embeddings.
  int64_t max_length = kModelMaxLength;
  // none: tokenize prompt + completion as one text (special tokens added as the tokenizer's
  // post-processor says). auto: the template of the checkpoint's tokenizer_config.json, none when
  // it has none. chatml | qwen3 | llama3: that template. Any other value: a directory whose
  // tokenizer_config.json names the template. With a template the conversation is the record's
  // "messages" (or its "prompt" string, else the input's prompt, as one user turn) followed by the
  // completion as the assistant's turn, rendered without a generation prompt.
  std::string chat_template = "none";
  bool normalize = false;         // running mean/std normalisation of the raw head output
  double clip = 0;                // clip the (normalised) score to [-clip, clip]; 0 = off; >= 0
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (GPU only)
  std::string device = "cpu";     // cpu | cuda | cuda:<index>

  // InvalidArgument naming the option.
  absl::Status validate() const;
};

// Reads `spec.params` strictly (an unknown option is an error): path (required; relative to
// spec.config_dir), batch_size, max_length, chat_template, normalize, clip, dtype, device.
absl::StatusOr<RewardModelOptions> parse_reward_model_options(const RewardSpec& spec);

// Running mean and (population) standard deviation of the raw scores seen so far.
struct RewardModelStats {
  int64_t count = 0;
  double mean = 0;
  double stddev = 0;
};

class RewardModel : public RewardFunction {
 public:
  // Loads the checkpoint. Errors name the directory or file: a missing config.json, weights or
  // tokenizer; an architecture that is not *ForSequenceClassification; num_labels (or the rows
  // of score.weight) other than 1; a missing score.weight or a score.bias; a chat template that
  // does not resolve; options that fail validate().
  static absl::StatusOr<std::unique_ptr<RewardModel>> create(const RewardModelOptions& options);
  ~RewardModel() override;

  // Thread-safe. Components: "raw" (the head output before normalisation and clipping). Errors
  // for one sample name its record: a chat record with malformed "messages", an empty input, a
  // token id outside the model's vocabulary, a LibTorch failure. Invalid UTF-8 in the prompt or
  // completion is replaced by U+FFFD first.
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override;
  // Tokenizes every input (in the calling thread), then runs forward passes of up to batch_size
  // samples of similar length (rows right-padded), one at a time under a lock. With normalize,
  // the call's raw scores are added to the running statistics first, then normalised with the
  // updated mean and std (so the very first score normalises to 0). Thread-safe.
  std::vector<absl::StatusOr<RewardOutput>> score_batch(
      const std::vector<RewardInput>& inputs) const override;
  bool batched() const override { return true; }

  // The token ids scored for `input` (template applied, truncated to max_length). Thread-safe.
  absl::StatusOr<std::vector<int64_t>> tokenize(const RewardInput& input) const;

  // The decoder (without the head), e.g. for a benchmark's plain forward passes. Not locked:
  // callers must not run it concurrently with scoring when that matters to them.
  const model::DecoderModel& decoder() const;
  const RewardModelOptions& options() const;
  RewardModelStats stats() const;  // thread-safe

 private:
  struct State;
  explicit RewardModel(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
};

// The registered factory: parse_reward_model_options() then RewardModel::create().
absl::StatusOr<std::unique_ptr<RewardFunction>> make_reward_model(const RewardSpec& spec);

// Adds "reward_model" to registry.get<RewardFunction, const RewardSpec&>(). AlreadyExists when
// the name is taken.
absl::Status register_reward_model(core::PluginRegistry& registry);

}  // namespace flywheel::rewards
