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
#include "sft_data.h"

namespace flywheel::cli {

struct GreedyEvalOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> stop_ids;  // eos ids
  int64_t max_slots = 16;
};

class GreedyEvaluator {
 public:
  // The replica and the engine are allocated once (a full copy of the model on every rank); the
  // engine's context fits the longest prompt of `records` plus max_new_tokens.
  static absl::StatusOr<std::unique_ptr<GreedyEvaluator>> create(
      const model::ModelConfig& config, const model::Tokenizer* tokenizer,
      const GreedyEvalOptions& options, const std::vector<SftRecord>& records);
  // The fraction of `records` with an answer that greedy decoding gets exactly; NaN when none
  // has one. Collective over `comm`.
  absl::StatusOr<double> accuracy(trainer::ShardedDecoder& model,
                                  const std::vector<SftRecord>& records, comm::Communicator& comm);

 private:
  GreedyEvaluator() = default;
  std::shared_ptr<model::DecoderModel> replica_;
  std::unique_ptr<rollout::GenerationEngine> engine_;
  const model::Tokenizer* tokenizer_ = nullptr;
  GreedyEvalOptions options_;
};

}  // namespace flywheel::cli
