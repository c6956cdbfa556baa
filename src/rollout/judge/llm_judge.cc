#include "flywheel/rollout/judge/llm_judge.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <optional>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/padded_rows.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/model/torch_error.h"
#include "flywheel/rewards/param_reader.h"
#include "flywheel/rollout/engine.h"

namespace flywheel::rollout {
namespace {

namespace fs = std::filesystem;
using rewards::RewardInput;
using rewards::RewardOutput;

constexpr char kName[] = "llm_judge";

absl::Status bad_option(absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("reward '", kName, "': option '", key, "' ", problem));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::Status LlmJudgeOptions::validate() const {
  if (path.empty()) return bad_option("path", "is required (the judge's checkpoint directory)");
  if (verdict != "yes_prob" && verdict != "label" && verdict != "score") {
    return bad_option("verdict",
                      absl::StrCat("is '", verdict, "'; must be yes_prob, label or score"));
  }
  if (verdict == "yes_prob" && (yes.empty() || no.empty())) {
    return bad_option(yes.empty() ? "yes" : "no", "is empty; yes_prob reads its first token");
  }
  if (!(score_min < score_max) || !std::isfinite(score_min) || !std::isfinite(score_max)) {
    return bad_option("score_min", absl::StrCat("is ", score_min, " and score_max ", score_max,
                                                "; need finite score_min < score_max"));
  }
  if (max_new_tokens < 1) return bad_option("max_new_tokens", "must be >= 1");
  if (batch_size < 1) return bad_option("batch_size", "must be >= 1");
  if (max_length < 0) return bad_option("max_length", "must be >= 0 (0: the judge's own)");
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    return bad_option("dtype",
                      absl::StrCat("is '", dtype, "'; must be float32, bfloat16 or float16"));
  }
  if (verdict == "label") {
    absl::StatusOr<JudgeLabels> parsed = parse_judge_labels(labels);
    if (!parsed.ok()) return bad_option("labels", parsed.status().message());
  }
  absl::StatusOr<JudgeTemplate> parsed = JudgeTemplate::parse(template_text);
  if (!parsed.ok()) return bad_option("template", parsed.status().message());
  return absl::OkStatus();
}

absl::StatusOr<LlmJudgeOptions> parse_llm_judge_options(const rewards::RewardSpec& spec) {
  rewards::ParamReader r(spec);
  LlmJudgeOptions o;
  o.path = r.string("path", "");
  o.template_text = r.string("template", o.template_text);
  o.chat_template =
      r.choice("chat_template", o.chat_template, {"none", "auto", "chatml", "qwen3", "llama3"});
  o.verdict = r.choice("verdict", o.verdict, {"yes_prob", "label", "score"});
  o.yes = r.string("yes", o.yes);
  o.no = r.string("no", o.no);
  o.labels = r.string("labels", o.labels);
  o.score_min = r.number("score_min", o.score_min);
  o.score_max = r.number("score_max", o.score_max);
  o.max_new_tokens = r.integer("max_new_tokens", o.max_new_tokens, 1, 1 << 16);
  o.batch_size = r.integer("batch_size", o.batch_size, 1, 1 << 12);
  o.max_length =
      r.integer("max_length", o.max_length, 0, model::ModelConfig::kMaxPositionEmbeddings);
  o.dtype = r.choice("dtype", o.dtype, {"float32", "bfloat16", "float16"});
  o.device = r.string("device", o.device);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (!o.path.empty() && fs::path(o.path).is_relative() && !spec.config_dir.empty()) {
    o.path = (fs::path(spec.config_dir) / o.path).string();
  }
  FLYWHEEL_RETURN_IF_ERROR(o.validate());
  return o;
}

struct LlmJudge::State {
  LlmJudgeOptions options;
  JudgeTemplate prompt_template;
  JudgeLabels labels;
  std::shared_ptr<model::DecoderModel> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::optional<model::ChatTemplate> chat;
  std::unique_ptr<GenerationEngine> engine;  // label, score
  std::vector<int64_t> stop_ids;
  int64_t yes_id = -1, no_id = -1;  // yes_prob
  int64_t max_length = 0;

  mutable absl::Mutex mu;  // one judging call at a time: the model and the engine are shared

  // The verdicts of `rows` (token ids), one per row: from the next-token distribution
  // (yes_prob) or from greedy outputs. Throws what the forward throws.
  std::vector<absl::StatusOr<double>> judge(
      const std::vector<const std::vector<int64_t>*>& rows) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::vector<absl::StatusOr<double>> next_token_verdicts(
      const std::vector<const std::vector<int64_t>*>& rows) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::vector<absl::StatusOr<double>> generated_verdicts(
      const std::vector<const std::vector<int64_t>*>& rows) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<double> read_output(const std::string& output) const;
};

LlmJudge::LlmJudge(std::unique_ptr<State> state) : state_(std::move(state)) {}
LlmJudge::~LlmJudge() = default;

const LlmJudgeOptions& LlmJudge::options() const { return state_->options; }

absl::StatusOr<std::unique_ptr<LlmJudge>> LlmJudge::create(const LlmJudgeOptions& options) {
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  auto s = std::make_unique<State>();
  s->options = options;
  FLYWHEEL_ASSIGN_OR_RETURN(s->prompt_template, JudgeTemplate::parse(options.template_text));
  if (options.verdict == "label") {
    FLYWHEEL_ASSIGN_OR_RETURN(s->labels, parse_judge_labels(options.labels));
  }
  std::error_code ec;
  if (!fs::is_directory(options.path, ec)) {
    return absl::NotFoundError(absl::StrCat("reward '", kName, "': the judge '", options.path,
                                            "' is not a directory (a Hugging Face checkpoint)"));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype, model::parse_dtype(options.dtype));
  std::optional<at::Device> device;
  try {
    device = at::Device(options.device);
  } catch (const std::exception&) {
    return bad_option("device",
                      absl::StrCat("is '", options.device, "'; must be cpu, cuda or cuda:<index>"));
  }
  if (device->is_cuda() && !at::hasCUDA()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reward '", kName, "': device '", options.device, "' but no CUDA device is available"));
  }
  try {
    absl::StatusOr<std::unique_ptr<model::DecoderModel>> loaded =
        model::load_hf_model(options.path, model::DecoderOptions{dtype, *device});
    if (!loaded.ok()) {
      return absl::Status(
          loaded.status().code(),
          absl::StrCat("reward '", kName, "': the judge: ", loaded.status().message()));
    }
    s->model = std::move(*loaded);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(options.path, ": loading the judge failed: ", model::exception_message(e)));
  }
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::load_tokenizer(options.path);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat(options.path, ": the judge's tokenizer: ", tokenizer.status().message()));
  }
  s->tokenizer = std::move(*tokenizer);
  if (options.chat_template == "auto") {
    absl::StatusOr<model::ChatTemplate> detected = model::ChatTemplate::detect(options.path);
    if (detected.ok()) {
      s->chat = *detected;
    } else if (!absl::IsNotFound(detected.status())) {
      return detected.status();
    }
  } else if (options.chat_template != "none") {
    FLYWHEEL_ASSIGN_OR_RETURN(model::ChatTemplate named,
                              model::ChatTemplate::by_name(options.chat_template));
    s->chat = named;
  }
  const model::ModelConfig& config = s->model->config();
  const int64_t positions = config.max_position_embeddings;
  s->max_length = options.max_length == 0 ? positions : options.max_length;
  if (s->max_length > positions) {
    return bad_option("max_length",
                      absl::StrCat("is ", options.max_length, "; the judge at ", options.path,
                                   " has max_position_embeddings ", positions));
  }
  if (options.verdict == "yes_prob") {
    auto first_token = [&](const std::string& word, const char* key) -> absl::StatusOr<int64_t> {
      absl::StatusOr<std::vector<int64_t>> ids =
          s->tokenizer->encode(word, model::EncodeOptions{/*add_special_tokens=*/false});
      if (!ids.ok() || ids->empty() || ids->front() >= config.vocab_size) {
        return bad_option(
            key, absl::StrCat("is '", word, "', which the judge's tokenizer ",
                              ids.ok() ? "maps to no token of the model" : ids.status().message()));
      }
      return ids->front();
    };
    FLYWHEEL_ASSIGN_OR_RETURN(s->yes_id, first_token(options.yes, "yes"));
    FLYWHEEL_ASSIGN_OR_RETURN(s->no_id, first_token(options.no, "no"));
    if (s->yes_id == s->no_id) {
      return bad_option("no", absl::StrCat("is '", options.no,
                                           "', which begins with the same "
                                           "token as yes ('",
                                           options.yes, "'): yes_prob could not tell them apart"));
    }
  } else {
    s->stop_ids = model::generation_eos_ids(config, options.path);
    EngineOptions engine;
    engine.max_slots = options.batch_size;
    engine.max_seq_len = std::min<int64_t>(positions, s->max_length + options.max_new_tokens);
    engine.max_prefill_tokens = std::max<int64_t>(engine.max_prefill_tokens, engine.max_seq_len);
    absl::StatusOr<std::unique_ptr<GenerationEngine>> created =
        GenerationEngine::create(s->model, engine, EngineContext{s->tokenizer.get(), nullptr, 0});
    if (!created.ok()) return created.status();
    s->engine = std::move(*created);
  }
  return std::unique_ptr<LlmJudge>(new LlmJudge(std::move(s)));
}

absl::StatusOr<std::vector<int64_t>> LlmJudge::prompt_ids(const RewardInput& input) const {
  const State& s = *state_;
  FLYWHEEL_ASSIGN_OR_RETURN(std::string text, s.prompt_template.render(input));
  model::EncodeOptions encode;
  if (s.chat) {
    absl::StatusOr<std::string> rendered =
        s.chat->render({{"user", std::move(text)}}, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return rendered.status();
    text = std::move(*rendered);
    encode.add_special_tokens = false;  // the template holds them
  }
  absl::StatusOr<std::vector<int64_t>> ids = s.tokenizer->encode(text, encode);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.record_name, ": reward '", kName, "': ", why));
  };
  if (!ids.ok()) return bad(ids.status().message());
  if (ids->empty()) return bad("the judge's prompt is empty (template, prompt and completion)");
  const int64_t vocab = s.model->config().vocab_size;
  for (int64_t id : *ids) {
    if (id < 0 || id >= vocab) {
      return bad(absl::StrCat("the judge's tokenizer gave id ", id,
                              ", outside its model's "
                              "vocabulary [0, ",
                              vocab, ")"));
    }
  }
  if (static_cast<int64_t>(ids->size()) > s.max_length) {
    return bad(absl::StrCat("the judge's prompt is ", ids->size(),
                            " tokens, more than its max_length ", s.max_length));
  }
  return ids;
}

std::vector<absl::StatusOr<double>> LlmJudge::State::next_token_verdicts(
    const std::vector<const std::vector<int64_t>*>& rows) const {
  std::vector<int64_t> read;
  for (const std::vector<int64_t>* ids : rows)
    read.push_back(static_cast<int64_t>(ids->size()) - 1);
  const at::Tensor hidden = model::hidden_at(*model, rows, read);  // [B, H]
  at::NoGradGuard no_grad;
  const at::Tensor logprobs =
      at::log_softmax(model->logits(hidden).to(at::kFloat), -1).to(at::kCPU, at::kDouble);
  auto lp = logprobs.accessor<double, 2>();
  std::vector<absl::StatusOr<double>> out;
  for (size_t b = 0; b < rows.size(); ++b) {
    const double yes = lp[b][yes_id], no = lp[b][no_id];
    if (std::isnan(yes) || std::isnan(no) || (std::isinf(yes) && std::isinf(no))) {
      out.push_back(absl::InternalError(
          absl::StrCat("the judge's log-probabilities of yes and no are ", yes, " and ", no)));
    } else {
      out.push_back(yes_probability(yes, no));
    }
  }
  return out;
}

absl::StatusOr<double> LlmJudge::State::read_output(const std::string& output) const {
  if (options.verdict == "label") return label_verdict(output, labels);
  FLYWHEEL_ASSIGN_OR_RETURN(double value,
                            score_verdict(output, options.score_min, options.score_max));
  return value;
}

std::vector<absl::StatusOr<double>> LlmJudge::State::generated_verdicts(
    const std::vector<const std::vector<int64_t>*>& rows) const {
  std::vector<absl::StatusOr<double>> out(rows.size(), absl::UnknownError("not judged"));
  SamplingParams sampling;
  sampling.temperature = 0;
  sampling.max_new_tokens = options.max_new_tokens;
  sampling.stop_token_ids = stop_ids;
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::Status submitted = engine->submit({std::to_string(i), *rows[i], sampling, 1});
    if (!submitted.ok()) out[i] = submitted;
  }
  for (GroupResult& group : engine->run_until_idle()) {
    const size_t i = std::stoul(group.request_id);
    if (group.samples.empty()) {
      out[i] = absl::InternalError("the judge's engine dropped the request");
      continue;
    }
    Sample& sample = group.samples.front();
    if (sample.finish_reason == FinishReason::kError) {
      out[i] = absl::InternalError(absl::StrCat("the judge's generation failed: ", sample.error));
      continue;
    }
    std::vector<int64_t>& ids = sample.token_ids;
    while (!ids.empty() && std::count(stop_ids.begin(), stop_ids.end(), ids.back()) > 0) {
      ids.pop_back();
    }
    absl::StatusOr<std::string> text =
        tokenizer->decode(ids, model::DecodeOptions{/*skip_special_tokens=*/true});
    out[i] = text.ok() ? read_output(*text) : absl::StatusOr<double>(text.status());
  }
  return out;
}

std::vector<absl::StatusOr<double>> LlmJudge::State::judge(
    const std::vector<const std::vector<int64_t>*>& rows) const {
  return options.verdict == "yes_prob" ? next_token_verdicts(rows) : generated_verdicts(rows);
}

absl::StatusOr<RewardOutput> LlmJudge::score(const RewardInput& input) const {
  std::vector<absl::StatusOr<RewardOutput>> out = score_batch({input});
  return std::move(out.front());
}

std::vector<absl::StatusOr<RewardOutput>> LlmJudge::score_batch(
    const std::vector<RewardInput>& inputs) const {
  const State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  const size_t n = inputs.size();
  std::vector<absl::StatusOr<RewardOutput>> out(n, absl::UnknownError("not judged"));
  std::vector<std::vector<int64_t>> ids(n);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<std::vector<int64_t>> t = prompt_ids(inputs[i]);
    if (!t.ok()) {
      out[i] = t.status();
      continue;
    }
    ids[i] = std::move(*t);
    order.push_back(i);
  }
  std::vector<absl::StatusOr<double>> verdicts(n, absl::UnknownError("not judged"));
  for (const std::vector<size_t>& batch :
       model::length_sorted_batches(ids, order, s.options.batch_size)) {
    std::vector<const std::vector<int64_t>*> rows;
    for (size_t i : batch) rows.push_back(&ids[i]);
    std::vector<absl::StatusOr<double>> got;
    std::string error;
    try {
      absl::MutexLock lock(&s.mu);
      got = s.judge(rows);
    } catch (const std::exception& e) {
      error = model::exception_message(e);
      if (s.engine) s.engine->abort_all();
    }
    for (size_t k = 0; k < batch.size(); ++k) {
      verdicts[batch[k]] = error.empty()
                               ? std::move(got[k])
                               : absl::InternalError(absl::StrCat("judging failed: ", error));
    }
  }
  const double latency = seconds_since(start);
  for (size_t i : order) {
    if (!verdicts[i].ok()) {
      out[i] = absl::Status(verdicts[i].status().code(),
                            absl::StrCat(inputs[i].record_name, ": reward '", kName,
                                         "': ", verdicts[i].status().message()));
      continue;
    }
    RewardOutput o;
    const double v = *verdicts[i];
    o.components["verdict"] = v;
    o.components["latency_s"] = latency;
    o.score = s.options.verdict == "score"
                  ? (v - s.options.score_min) / (s.options.score_max - s.options.score_min)
                  : v;
    out[i] = std::move(o);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<rewards::RewardFunction>> make_llm_judge(
    const rewards::RewardSpec& spec) {
  FLYWHEEL_ASSIGN_OR_RETURN(LlmJudgeOptions options, parse_llm_judge_options(spec));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<LlmJudge> judge, LlmJudge::create(options));
  return std::unique_ptr<rewards::RewardFunction>(std::move(judge));
}

absl::Status register_llm_judge(core::PluginRegistry& registry) {
  return registry.get<rewards::RewardFunction, const rewards::RewardSpec&>().add(kName,
                                                                                 &make_llm_judge);
}

}  // namespace flywheel::rollout
