#include "greedy_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <ATen/ATen.h>

#include "absl/strings/ascii.h"

namespace flywheel::cli {

absl::StatusOr<std::unique_ptr<GreedyEvaluator>> GreedyEvaluator::create(
    const model::ModelConfig& config, const model::Tokenizer* tokenizer,
    const GreedyEvalOptions& options, const std::vector<SftRecord>& records) {
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> replica =
      model::DecoderModel::create(config, {});
  if (!replica.ok()) return replica.status();
  std::unique_ptr<GreedyEvaluator> evaluator(new GreedyEvaluator());
  evaluator->replica_ = std::move(*replica);
  evaluator->tokenizer_ = tokenizer;
  evaluator->options_ = options;
  int64_t longest = 1;
  for (const SftRecord& r : records) {
    if (r.has_answer) longest = std::max<int64_t>(longest, r.example.prompt.size());
  }
  rollout::EngineOptions engine_options;
  engine_options.max_slots = options.max_slots;
  engine_options.max_seq_len = std::max<int64_t>(
      2, std::min(config.max_position_embeddings, longest + options.max_new_tokens + 1));
  auto engine = rollout::GenerationEngine::create(evaluator->replica_, engine_options);
  if (!engine.ok()) return engine.status();
  evaluator->engine_ = std::move(*engine);
  return evaluator;
}

absl::StatusOr<double> GreedyEvaluator::accuracy(trainer::ShardedDecoder& model,
                                                 const std::vector<SftRecord>& records,
                                                 comm::Communicator& comm) {
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : replica_->named_parameters()) params[name] = p;
  model.for_each_full_bucket(64 << 20, at::kFloat,
                             [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
                               at::NoGradGuard no_grad;
                               for (const auto& [name, t] : bucket) params.at(name).copy_(t);
                             });
  std::map<std::string, const SftRecord*> mine;
  int64_t refused = 0;
  int64_t index = 0;
  for (const SftRecord& r : records) {
    if (!r.has_answer) continue;
    if (index++ % comm.size() != comm.rank()) continue;
    rollout::GenerationRequest request;
    request.id = std::to_string(index);
    request.prompt_ids.assign(r.example.prompt.begin(), r.example.prompt.end());
    request.sampling.temperature = 0;
    request.sampling.max_new_tokens = options_.max_new_tokens;
    request.sampling.stop_token_ids = options_.stop_ids;
    // A refused record (say a prompt longer than the model's context) counts as wrong: ranks
    // must not leave the collective below.
    if (engine_->submit(std::move(request)).ok()) {
      mine[std::to_string(index)] = &r;
    } else {
      ++refused;
    }
  }
  double correct = 0;
  for (rollout::GroupResult& result : engine_->run_until_idle()) {
    std::vector<int64_t> ids = result.samples.at(0).token_ids;
    if (!ids.empty() && result.samples[0].finish_reason == rollout::FinishReason::kStop) {
      ids.pop_back();  // the eos
    }
    absl::StatusOr<std::string> text = tokenizer_->decode(ids);
    const std::string& answer = mine.at(result.request_id)->answer;
    if (text.ok() && absl::StripAsciiWhitespace(*text) == absl::StripAsciiWhitespace(answer)) {
      ++correct;
    }
  }
  at::Tensor counts =
      at::tensor({correct, static_cast<double>(mine.size() + refused)}, at::kDouble);
  comm.all_reduce_host(counts, comm::ReduceOp::kSum);
  const double total = counts[1].item<double>();
  return total > 0 ? counts[0].item<double>() / total : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace flywheel::cli
