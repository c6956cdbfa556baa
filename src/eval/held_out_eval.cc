#include "flywheel/eval/held_out_eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include <ATen/ATen.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/composite_reward.h"

namespace flywheel::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What one engine request of the evaluation is for.
struct Request {
  const trainer::SftRecord* record = nullptr;
  bool sampled = false;
};

// One finished completion, before and after judging.
struct Completion {
  const trainer::SftRecord* record = nullptr;
  bool sampled = false;
  std::string text;
  bool decoded = false;
  std::vector<int32_t> ids;
  bool truncated = false;
  double reward = kNaN;
  bool correct = false;
  std::string last_turn;  // an episode's last model turn, decoded (the answer judge's text)
};

// Decodes `ids` without a final stop token; false when they cannot be decoded.
bool decode_text(const model::Tokenizer& tokenizer, std::vector<int64_t> ids, bool stopped,
                 const std::vector<int64_t>& stop_ids, std::string* text) {
  if (stopped && !ids.empty() &&
      std::find(stop_ids.begin(), stop_ids.end(), ids.back()) != stop_ids.end()) {
    ids.pop_back();
  }
  absl::StatusOr<std::string> decoded = tokenizer.decode(ids);
  if (!decoded.ok()) return false;
  *text = std::move(*decoded);
  return true;
}

// A finished sample of `request`, decoded (without its final stop token), not yet judged.
Completion completion_of(const Request& request, const rollout::Sample& sample,
                         const model::Tokenizer& tokenizer, const std::vector<int64_t>& stop_ids) {
  Completion c;
  c.record = request.record;
  c.sampled = request.sampled;
  c.decoded = decode_text(tokenizer, sample.token_ids,
                          sample.finish_reason == rollout::FinishReason::kStop, stop_ids, &c.text);
  c.ids.assign(sample.token_ids.begin(), sample.token_ids.end());
  c.truncated = sample.finish_reason == rollout::FinishReason::kLength;
  return c;
}

}  // namespace

struct HeldOutEvaluator::Generated {
  std::map<std::string, Request> requests;
  std::vector<Completion> done;
  std::map<std::string, std::pair<size_t, size_t>> spans;  // request id -> [first, end) in done
  int64_t judged_here = 0;
  double greedy_tokens = 0;
  double greedy_turns = 0, greedy_tool_calls = 0;  // episodes only
  int64_t refused = 0;                             // requests the engine or runner refused
  std::string first_refusal;
};

absl::StatusOr<trainer::SftData> load_eval_data(const core::Config& config,
                                                const model::TokenizerSetup& tokenizers,
                                                int64_t vocab_size, const std::string& path) {
  trainer::SftDataOptions o = trainer::SftDataOptions::from_config(config, vocab_size);
  o.require_response = false;
  o.keep_records = true;
  const model::ChatTemplate* chat = tokenizers.chat_template ? &*tokenizers.chat_template : nullptr;
  absl::StatusOr<trainer::SftData> data =
      trainer::load_sft_data(path, o, *tokenizers.tokenizer, chat);
  if (!data.ok()) return data.status();
  if (config.eval.max_prompts > 0 &&
      static_cast<int64_t>(data->records.size()) > config.eval.max_prompts) {
    data->records.resize(config.eval.max_prompts);
  }
  return data;
}

absl::StatusOr<std::unique_ptr<rewards::ScoringPool>> make_eval_scorer(
    const core::Config& config, core::PluginRegistry& registry, const std::string& config_dir) {
  const core::Config& c = config;
  const bool use_rewards = c.eval.judge == core::EvalJudge::kRewards ||
                           (c.eval.judge == core::EvalJudge::kAuto && !c.rewards.functions.empty());
  if (!use_rewards) return std::unique_ptr<rewards::ScoringPool>();
  if (c.rewards.functions.empty()) {
    return absl::InvalidArgumentError("eval.judge is rewards but rewards.functions is empty");
  }
  auto composite =
      rewards::CompositeReward::create(c.rewards, registry, c.rollout.max_new_tokens, config_dir);
  if (!composite.ok()) return composite.status();
  return rewards::ScoringPool::create(*composite,
                                      rewards::ScoringPoolOptions::from_config(c.rewards));
}

HeldOutEvalOptions eval_options_from_config(const core::Config& config,
                                            const model::ModelConfig& model_config,
                                            rewards::ScoringPool* scorer) {
  HeldOutEvalOptions o;
  o.max_new_tokens =
      config.eval.max_new_tokens > 0 ? config.eval.max_new_tokens : config.rollout.max_new_tokens;
  o.stop_ids = model_config.eos_token_ids;
  o.samples = config.eval.samples;
  o.temperature = config.eval.temperature;
  o.top_p = config.eval.top_p;
  o.seed = static_cast<uint64_t>(config.eval.seed);
  o.scorer = scorer;
  o.correct_reward = config.eval.correct_reward;
  return o;
}

void log_eval_result(const HeldOutEvalResult& result,
                     const std::function<void(const std::string&, double)>& log) {
  log("eval/accuracy", result.accuracy);
  log("eval/mean_length", result.mean_length);
  if (!std::isnan(result.mean_reward)) log("eval/reward/mean", result.mean_reward);
  if (result.k > 0) {
    log(absl::StrCat("eval/pass@", result.k), result.pass_at_k);
    log(absl::StrCat("eval/mean@", result.k), result.mean_at_k);
  }
  if (!std::isnan(result.mean_turns)) {
    log("eval/turns/mean", result.mean_turns);
    log("eval/tool_calls/mean", result.mean_tool_calls);
  }
}

absl::Status set_eval_environment(const core::Config& config, core::PluginRegistry& registry,
                                  const std::string& config_dir,
                                  const model::TokenizerSetup& tokenizers,
                                  HeldOutEvalOptions* options) {
  FLYWHEEL_ASSIGN_OR_RETURN(options->environment,
                            rollout::make_environment(config.environment, registry, config_dir));
  if (!options->environment) return absl::OkStatus();
  FLYWHEEL_ASSIGN_OR_RETURN(rollout::TurnMarkerIds markers, rollout::turn_marker_ids(tokenizers));
  options->episodes = rollout::EpisodeOptions::from_config(config.environment, std::move(markers));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HeldOutEvaluator>> HeldOutEvaluator::create(
    const model::ModelConfig& config, const model::Tokenizer* tokenizer,
    const HeldOutEvalOptions& options, const std::vector<trainer::SftRecord>& records) {
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> replica =
      model::DecoderModel::create(config, {});
  if (!replica.ok()) return replica.status();
  std::unique_ptr<HeldOutEvaluator> evaluator(new HeldOutEvaluator());
  evaluator->replica_ = std::move(*replica);
  evaluator->tokenizer_ = tokenizer;
  evaluator->options_ = options;
  int64_t longest = 1;
  for (const trainer::SftRecord& r : records) {
    if (!evaluator->judged(r)) continue;
    if ((options.scorer != nullptr || options.environment) && r.record == nullptr) {
      return absl::InvalidArgumentError(
          "the rewards judge and episodes need the records' JSON (load them with "
          "load_eval_data)");
    }
    longest = std::max<int64_t>(longest, r.example.prompt.size());
  }
  rollout::EngineOptions engine_options;
  engine_options.max_slots = std::max(options.max_slots, options.samples);
  engine_options.max_seq_len = std::max<int64_t>(
      2, std::min(config.max_position_embeddings, longest + options.max_new_tokens + 1));
  rollout::EngineContext context;
  context.tokenizer = tokenizer;  // episodes' turns end at the environment's stop strings
  auto engine = rollout::GenerationEngine::create(evaluator->replica_, engine_options, context);
  if (!engine.ok()) return engine.status();
  evaluator->engine_ = std::move(*engine);
  return evaluator;
}

absl::StatusOr<HeldOutEvalResult> HeldOutEvaluator::evaluate(
    trainer::ShardedDecoder& model, const std::vector<trainer::SftRecord>& records,
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

absl::Status HeldOutEvaluator::load(const model::DecoderModel::TensorLookup& lookup) {
  return replica_->load(lookup);
}

rollout::SamplingParams HeldOutEvaluator::sampling(bool sampled, int64_t index) const {
  rollout::SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = options_.max_new_tokens;
  p.stop_token_ids = options_.stop_ids;
  if (sampled) {
    p.temperature = options_.temperature;
    p.top_p = options_.top_p;
    p.seed = options_.seed * 1000003u + static_cast<uint64_t>(index);
  }
  return p;
}

template <typename EngineRequest, typename Submit>
void HeldOutEvaluator::submit_share(const std::vector<trainer::SftRecord>& records,
                                    comm::Communicator& comm, Generated* out, Submit submit) {
  int64_t index = 0;
  for (const trainer::SftRecord& r : records) {
    if (!judged(r)) continue;
    const int64_t i = index++;
    if (i % comm.size() != comm.rank()) continue;
    ++out->judged_here;
    for (const bool sampled : {false, true}) {
      if (sampled && options_.samples == 0) break;
      EngineRequest request;
      request.id = absl::StrCat(sampled ? "s" : "g", i);
      request.prompt_ids.assign(r.example.prompt.begin(), r.example.prompt.end());
      request.sampling = sampling(sampled, i);
      request.n = sampled ? options_.samples : 1;
      const std::string id = request.id;
      // A refused record (say a prompt longer than the model's context) counts as wrong: ranks
      // must not leave the collective of evaluate_loaded().
      const absl::Status s = submit(r, std::move(request));
      if (!s.ok()) {
        if (out->refused++ == 0) out->first_refusal = std::string(s.message());
        break;
      }
      out->requests[id] = {&r, sampled};
    }
  }
  if (out->refused > 0) {
    FLYWHEEL_LOG_WARN("held-out evaluation: %d request(s) refused, counted as wrong; the first: %s",
                      out->refused, out->first_refusal);
  }
}

void HeldOutEvaluator::generate(const std::vector<trainer::SftRecord>& records,
                                comm::Communicator& comm, Generated* out) {
  submit_share<rollout::GenerationRequest>(
      records, comm, out, [&](const trainer::SftRecord&, rollout::GenerationRequest request) {
        return engine_->submit(std::move(request));
      });
  for (rollout::GroupResult& result : engine_->run_until_idle()) {
    const Request& request = out->requests.at(result.request_id);
    const size_t first = out->done.size();
    for (const rollout::Sample& sample : result.samples) {
      if (!request.sampled) out->greedy_tokens += static_cast<double>(sample.token_ids.size());
      out->done.push_back(completion_of(request, sample, *tokenizer_, options_.stop_ids));
    }
    out->spans[result.request_id] = {first, out->done.size()};
  }
}

void HeldOutEvaluator::run_episodes(const std::vector<trainer::SftRecord>& records,
                                    comm::Communicator& comm, Generated* out) {
  rollout::EpisodeRunner runner(engine_.get(), options_.environment, tokenizer_, options_.episodes);
  submit_share<rollout::EpisodeRequest>(
      records, comm, out, [&](const trainer::SftRecord& r, rollout::EpisodeRequest request) {
        request.record = r.record;
        return runner.submit(std::move(request));
      });
  auto collect = [&] {
    for (rollout::EpisodeGroup& group : runner.take_finished()) {
      const Request& request = out->requests.at(group.request_id);
      const size_t first = out->done.size();
      for (const rollout::Episode& episode : group.episodes) {
        const rollout::Sample& sample = episode.sample;
        if (!request.sampled) {
          out->greedy_tokens += static_cast<double>(sample.token_ids.size());
          out->greedy_turns += static_cast<double>(episode.turns());
          out->greedy_tool_calls += static_cast<double>(episode.tool_calls);
        }
        Completion c = completion_of(request, sample, *tokenizer_, options_.stop_ids);
        if (options_.scorer == nullptr) {  // the answer judge reads the last model turn
          size_t turn_start = sample.token_ids.size();  // its trailing run of model tokens
          while (turn_start > 0 && sample.from_model[turn_start - 1]) --turn_start;
          std::vector<int64_t> last(sample.token_ids.begin() + static_cast<int64_t>(turn_start),
                                    sample.token_ids.end());
          c.decoded = c.decoded && decode_text(*tokenizer_, std::move(last),
                                               sample.finish_reason == rollout::FinishReason::kStop,
                                               options_.stop_ids, &c.last_turn);
        }
        out->done.push_back(std::move(c));
      }
      out->spans[group.request_id] = {first, out->done.size()};
    }
  };
  while (!runner.idle()) {
    runner.step();
    collect();
  }
  collect();
}

absl::StatusOr<HeldOutEvalResult> HeldOutEvaluator::evaluate_loaded(
    const std::vector<trainer::SftRecord>& records, comm::Communicator& comm) {
  const int64_t k = options_.samples;
  Generated generated;
  if (options_.environment) {
    run_episodes(records, comm, &generated);
  } else {
    generate(records, comm, &generated);
  }
  std::vector<Completion>& done = generated.done;
  const std::map<std::string, Request>& requests = generated.requests;

  if (options_.scorer != nullptr) {
    std::vector<rewards::OwnedSample> samples;
    for (const Completion& c : done) {
      rewards::OwnedSample s;
      s.record = c.record->record;
      s.record_name = c.record->where;
      s.prompt = c.record->prompt_text;
      s.completion = c.text;
      s.completion_ids = c.ids;
      s.truncated = c.truncated;
      samples.push_back(std::move(s));
    }
    std::vector<rewards::ScoredSample> scored = options_.scorer->score(std::move(samples));
    for (size_t i = 0; i < done.size(); ++i) {
      done[i].reward = scored.at(i).reward;
      done[i].correct = done[i].decoded && done[i].reward >= options_.correct_reward;
    }
  } else {
    for (Completion& c : done) {
      const std::string& text = options_.environment ? c.last_turn : c.text;
      c.correct = c.decoded &&
                  absl::StripAsciiWhitespace(text) == absl::StripAsciiWhitespace(c.record->answer);
    }
  }

  // Sums over this rank's records: greedy correct, records, greedy tokens, greedy completions,
  // greedy reward, correct samples, records with a correct sample.
  // Then greedy model turns and tool calls.
  double sums[9] = {0,
                    static_cast<double>(generated.judged_here),
                    generated.greedy_tokens,
                    0,
                    0,
                    0,
                    0,
                    generated.greedy_turns,
                    generated.greedy_tool_calls};
  for (const auto& [id, span] : generated.spans) {
    const bool sampled = requests.at(id).sampled;
    int64_t correct = 0;
    for (size_t i = span.first; i < span.second; ++i) correct += done[i].correct ? 1 : 0;
    if (sampled) {
      sums[5] += static_cast<double>(correct);
      sums[6] += correct > 0 ? 1 : 0;
    } else {
      sums[0] += static_cast<double>(correct);
      sums[3] += 1;
      if (options_.scorer != nullptr && span.second > span.first) {
        sums[4] += done[span.first].reward;
      }
    }
  }
  at::Tensor counts = at::tensor(std::vector<double>(sums, sums + 9), at::kDouble);
  comm.all_reduce_host(counts, comm::ReduceOp::kSum);
  auto at_ = [&](int64_t i) { return counts[i].item<double>(); };
  HeldOutEvalResult out;
  const double total = at_(1);
  out.records = static_cast<int64_t>(total);
  out.accuracy = total > 0 ? at_(0) / total : kNaN;
  out.mean_reward = options_.scorer != nullptr && at_(3) > 0 ? at_(4) / at_(3) : kNaN;
  out.mean_length = at_(3) > 0 ? at_(2) / at_(3) : 0.0;
  out.k = k;
  out.pass_at_k = k > 0 && total > 0 ? at_(6) / total : kNaN;
  out.mean_at_k = k > 0 && total > 0 ? at_(5) / (total * static_cast<double>(k)) : kNaN;
  if (options_.environment && at_(3) > 0) {
    out.mean_turns = at_(7) / at_(3);
    out.mean_tool_calls = at_(8) / at_(3);
  }
  return out;
}

absl::Status HeldOutEvaluation::set_up(const core::Config& config, core::PluginRegistry& registry,
                                       const std::string& config_dir,
                                       const model::ModelConfig& model_config,
                                       const model::TokenizerSetup& tokenizers,
                                       const std::string& path) {
  const core::Config& c = config;
  FLYWHEEL_ASSIGN_OR_RETURN(trainer::SftData loaded,
                            load_eval_data(c, tokenizers, model_config.vocab_size, path));
  data = std::move(loaded);
  auto made = make_eval_scorer(c, registry, config_dir);
  if (!made.ok()) return made.status();
  scorer = std::move(*made);
  HeldOutEvalOptions options = eval_options_from_config(c, model_config, scorer.get());
  FLYWHEEL_RETURN_IF_ERROR(set_eval_environment(c, registry, config_dir, tokenizers, &options));
  auto created =
      HeldOutEvaluator::create(model_config, tokenizers.tokenizer.get(), options, data.records);
  if (!created.ok()) return created.status();
  evaluator = std::move(*created);
  return absl::OkStatus();
}

}  // namespace flywheel::eval
