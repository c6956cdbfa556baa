// process_reward_model: a learned process reward model (PRM). Scores each step of a completion
// with a Hugging Face token-classification checkpoint with one label
// (Qwen2ForTokenClassification, Qwen3ForTokenClassification, LlamaForTokenClassification; what
// `flywheel rm --process` exports): the decoder, "score.weight" [1, hidden] and an optional
// "score.bias", and the tokenizer in the same directory. A step's probability of being correct
// is sigmoid(head output) at the step's last token, the input laid out as
// model::encode_steps() lays it out for training: the prompt, then each step with the separator.
//
// Steps: the completion cut at every `separator` (default "\n"); with an empty separator every
// token of the completion, its stop token included (the answer's end is a step too), is a step:
// the PRM then reads the completion's own token ids, so it must share the policy's vocabulary,
// as a PRM trained from the policy does.
//
// reduce: `steps` (default) pays each step p_k / K at the token where the step ends, so that
// token-level estimators (gae, reinforce_pp) credit each step and the score (the row sum group
// estimators see) is the mean; `min`, `mean`, `last`: that outcome score, paid at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::rewards {

struct ProcessRewardModelOptions {
  std::string path;              // the checkpoint directory (absolute, or made so by the parser)
  std::string separator = "\n";  // "" = every completion token is a step
  std::string reduce = "steps";  // steps | min | mean | last
  int64_t batch_size = 8;        // samples per forward pass; >= 1
  // Tokens per sample (prompt and steps); a longer sample is an error (its fallback score).
  // 0 = the model's max_position_embeddings.
  int64_t max_length = 0;
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (GPU only)
  std::string device = "cpu";     // cpu | cuda | cuda:<index>
};

// Reads `spec.params` strictly: path (required; relative to spec.config_dir), separator,
// reduce, batch_size, max_length, dtype, device.
absl::StatusOr<ProcessRewardModelOptions> parse_process_reward_model_options(
    const RewardSpec& spec);

class ProcessRewardModel : public RewardFunction {
 public:
  // Loads the checkpoint. Errors name the directory or file: a missing config.json, weights or
  // tokenizer; an architecture that is not *ForTokenClassification; num_labels other than 1; a
  // missing score.weight; max_length past the model's positions.
  static absl::StatusOr<std::unique_ptr<ProcessRewardModel>> create(
      const ProcessRewardModelOptions& options);
  ~ProcessRewardModel() override;

  // Thread-safe. Components: "steps" (K), "min" and "mean" (of the step probabilities) and, with
  // reduce steps, "placed" (1 when the steps' ends were found among the completion's tokens:
  // with a separator this needs the PRM's tokenizer to decode the policy's tokens to the
  // completion; 0 pays the whole score at the last token). Errors for one sample name its
  // record: no step (an empty completion), a sample over max_length, an id outside the
  // vocabulary, a LibTorch failure.
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override;
  // Tokenizes every input, then runs forward passes of up to batch_size samples of similar
  // length, one at a time under a lock.
  std::vector<absl::StatusOr<RewardOutput>> score_batch(
      const std::vector<RewardInput>& inputs) const override;
  bool batched() const override { return true; }

 private:
  struct State;
  struct Prepared;
  explicit ProcessRewardModel(std::unique_ptr<State> state);
  absl::StatusOr<Prepared> prepare(const RewardInput& input) const;

  std::unique_ptr<State> state_;
};

// Adds "process_reward_model" to registry.get<RewardFunction, const RewardSpec&>().
absl::Status register_process_reward_model(core::PluginRegistry& registry);

}  // namespace flywheel::rewards
