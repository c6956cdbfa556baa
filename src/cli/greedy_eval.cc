#include "greedy_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <ATen/ATen.h>

#include "absl/strings/ascii.h"

namespace flywheel::cli {

absl::StatusOr<SftData> load_eval_data(const core::Config& config, const TokenizerSetup& tokenizers,
                                       int64_t vocab_size, const std::string& path) {
  SftDataOptions o;
  o.prompt_key = config.data.prompt_key;
  o.messages_key = config.data.messages_key;
  o.response_key = config.sft.response_key;
  o.answer_key = config.data.answer_key;
  o.max_tokens = config.model.max_seq_len;
  o.vocab_size = vocab_size;
  o.require_response = false;
  const model::ChatTemplate* chat = tokenizers.chat_template ? &*tokenizers.chat_template : nullptr;
  absl::StatusOr<SftData> data = load_sft_data(path, o, *tokenizers.tokenizer, chat);
  if (!data.ok()) return data.status();
  if (config.eval.max_prompts > 0 &&
      static_cast<int64_t>(data->records.size()) > config.eval.max_prompts) {
    data->records.resize(config.eval.max_prompts);
  }
  return data;
}

absl::StatusOr<std::unique_ptr<GreedyEvaluator>> make_greedy_evaluator(
    const core::Config& config, const model::ModelConfig& model_config,
    const model::Tokenizer* tokenizer, const std::vector<SftRecord>& records) {
  GreedyEvalOptions o;
  o.max_new_tokens =
      config.eval.max_new_tokens > 0 ? config.eval.max_new_tokens : config.rollout.max_new_tokens;
  o.stop_ids = model_config.eos_token_ids;
  return GreedyEvaluator::create(model_config, tokenizer, o, records);
}

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

absl::StatusOr<GreedyEvalResult> GreedyEvaluator::evaluate(trainer::ShardedDecoder& model,
                                                           const std::vector<SftRecord>& records,
                                                           comm::Communicator& comm) {
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : replica_->named_parameters()) params[name] = p;
  model.for_each_full_bucket(64 << 20, at::kFloat,
                             [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
                               at::NoGradGuard no_grad;
                               for (const auto& [name, t] : bucket) params.at(name).copy_(t);
                             });
  return evaluate_loaded(records, comm);
}

absl::Status GreedyEvaluator::load(const model::DecoderModel::TensorLookup& lookup) {
  return replica_->load(lookup);
}

absl::StatusOr<GreedyEvalResult> GreedyEvaluator::evaluate_loaded(
    const std::vector<SftRecord>& records, comm::Communicator& comm) {
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
  double correct = 0, tokens = 0;
  for (rollout::GroupResult& result : engine_->run_until_idle()) {
    std::vector<int64_t> ids = result.samples.at(0).token_ids;
    tokens += static_cast<double>(ids.size());
    if (!ids.empty() && result.samples[0].finish_reason == rollout::FinishReason::kStop) {
      ids.pop_back();  // the eos
    }
    absl::StatusOr<std::string> text = tokenizer_->decode(ids);
    const std::string& answer = mine.at(result.request_id)->answer;
    if (text.ok() && absl::StripAsciiWhitespace(*text) == absl::StripAsciiWhitespace(answer)) {
      ++correct;
    }
  }
  at::Tensor counts = at::tensor({correct, static_cast<double>(mine.size() + refused), tokens,
                                  static_cast<double>(mine.size())},
                                 at::kDouble);
  comm.all_reduce_host(counts, comm::ReduceOp::kSum);
  GreedyEvalResult result;
  const double total = counts[1].item<double>();
  result.records = static_cast<int64_t>(total);
  result.accuracy =
      total > 0 ? counts[0].item<double>() / total : std::numeric_limits<double>::quiet_NaN();
  const double generated = counts[3].item<double>();
  result.mean_length = generated > 0 ? counts[2].item<double>() / generated : 0.0;
  return result;
}

}  // namespace flywheel::cli
