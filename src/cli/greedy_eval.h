// Held-out exact-match accuracy of greedy completions, for `flywheel sft`: every rank copies the
// sharded model's full weights into a local replica (collective), generates with the rollout
// engine for its share of the records that carry an answer, and the ranks add up the matches.
// A completion matches when its text, up to the eos and stripped of surrounding whitespace,
// equals the answer stripped the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/model/tokenizer.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/trainer/sharded_decoder.h"
#include "prompt_encoder.h"
#include "sft_data.h"

namespace flywheel::cli {

struct GreedyEvalOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> stop_ids;  // eos ids
  int64_t max_slots = 16;
};

struct GreedyEvalResult {
  double accuracy = 0;     // NaN when no record has an answer
  double mean_length = 0;  // generated tokens per completion (the eos included)
  int64_t records = 0;     // records with an answer, all ranks
};

// The held-out records of `path` ({"prompt" or "messages", "answer"}; a response is not
// needed), the first eval.max_prompts of them when that is set.
absl::StatusOr<SftData> load_eval_data(const core::Config& config, const TokenizerSetup& tokenizers,
                                       int64_t vocab_size, const std::string& path);

// An evaluator for `records` with the config's eval options (max_new_tokens, else
// rollout.max_new_tokens) and the model's eos ids.
absl::StatusOr<std::unique_ptr<class GreedyEvaluator>> make_greedy_evaluator(
    const core::Config& config, const model::ModelConfig& model_config,
    const model::Tokenizer* tokenizer, const std::vector<SftRecord>& records);

class GreedyEvaluator {
 public:
  // The replica and the engine are allocated once (a full copy of the model on every rank); the
  // engine's context fits the longest prompt of `records` plus max_new_tokens.
  static absl::StatusOr<std::unique_ptr<GreedyEvaluator>> create(
      const model::ModelConfig& config, const model::Tokenizer* tokenizer,
      const GreedyEvalOptions& options, const std::vector<SftRecord>& records);
  // The fraction of `records` with an answer that greedy decoding gets exactly, and the mean
  // completion length, for the sharded `model`'s full weights. Collective over `comm`.
  absl::StatusOr<GreedyEvalResult> evaluate(trainer::ShardedDecoder& model,
                                            const std::vector<SftRecord>& records,
                                            comm::Communicator& comm);
  // The same for weights loaded by name (a Hugging Face directory): `flywheel eval`.
  absl::Status load(const model::DecoderModel::TensorLookup& lookup);
  absl::StatusOr<GreedyEvalResult> evaluate_loaded(const std::vector<SftRecord>& records,
                                                   comm::Communicator& comm);

 private:
  GreedyEvaluator() = default;
  std::shared_ptr<model::DecoderModel> replica_;
  std::unique_ptr<rollout::GenerationEngine> engine_;
  const model::Tokenizer* tokenizer_ = nullptr;
  GreedyEvalOptions options_;
};

}  // namespace flywheel::cli
