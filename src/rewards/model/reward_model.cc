#include "flywheel/rewards/model/reward_model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <numeric>
#include <optional>

#include <ATen/Context.h>
#include <c10/core/Device.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/utf8.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/padded_rows.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/model/torch_error.h"
#include "flywheel/rewards/param_reader.h"
#include "sequence_classifier.h"

namespace flywheel::rewards {
namespace {

namespace fs = std::filesystem;

constexpr char kName[] = "reward_model";
constexpr double kMinStddev = 1e-8;  // normalisation divides by at least this
constexpr double kMaxClip = 1e30;

// The template `name` names (see RewardModelOptions::chat_template); nullopt for none, and for
// auto when the checkpoint has no template.
absl::StatusOr<std::optional<model::ChatTemplate>> resolve_template(const std::string& name,
                                                                    const std::string& dir) {
  if (name == "none") return std::nullopt;
  if (name == "auto") {
    absl::StatusOr<model::ChatTemplate> detected = model::ChatTemplate::detect(dir);
    if (absl::IsNotFound(detected.status())) return std::nullopt;
    if (!detected.ok()) return detected.status();
    return *detected;
  }
  absl::StatusOr<model::ChatTemplate> named = model::ChatTemplate::by_name(name);
  if (named.ok()) return *named;
  std::error_code ec;
  if (fs::is_directory(name, ec)) {
    FLYWHEEL_ASSIGN_OR_RETURN(model::ChatTemplate detected, model::ChatTemplate::detect(name));
    return detected;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("reward '", kName, "': chat_template '", name,
                   "' is none of none, auto, chatml, qwen3, llama3 nor a directory with a "
                   "tokenizer_config.json"));
}

// The conversation to render: the record's "messages" (or its "prompt", else the input's prompt,
// as one user turn) plus the completion as the assistant's turn.
absl::StatusOr<std::vector<model::ChatMessage>> conversation(const RewardInput& input) {
  std::vector<model::ChatMessage> messages;
  const core::Json* given = input.record ? input.record->find("messages") : nullptr;
  if (given != nullptr) {
    if (!given->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(input.record_name, ": reward '", kName,
                                                     "': \"messages\" must be a list of messages"));
    }
    for (const core::Json& m : given->as_array()) {
      const core::Json* role = m.is_object() ? m.find("role") : nullptr;
      const core::Json* content = m.is_object() ? m.find("content") : nullptr;
      if (role == nullptr || !role->is_string() || content == nullptr || !content->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(input.record_name, ": reward '", kName, "': message ", messages.size(),
                         " must be {\"role\": \"...\", \"content\": \"...\"}"));
      }
      messages.push_back({role->as_string(), core::utf8_lossy(content->as_string())});
    }
  } else {
    const core::Json* prompt = input.record ? input.record->find("prompt") : nullptr;
    messages.push_back({"user", core::utf8_lossy(prompt != nullptr && prompt->is_string()
                                                     ? absl::string_view(prompt->as_string())
                                                     : input.prompt)});
  }
  messages.push_back({"assistant", core::utf8_lossy(input.completion)});
  return messages;
}

}  // namespace

absl::Status RewardModelOptions::validate() const {
  auto bad = [](absl::string_view key, absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward '", kName, "': option '", key, "' ", problem));
  };
  if (path.empty()) return bad("path", "is required (the checkpoint directory)");
  if (batch_size < 1) return bad("batch_size", absl::StrCat("is ", batch_size, "; must be >= 1"));
  if (max_length < 0) return bad("max_length", absl::StrCat("is ", max_length, "; must be >= 0"));
  if (!(clip >= 0) || !std::isfinite(clip)) {
    return bad("clip", absl::StrCat("is ", clip, "; must be a finite number >= 0"));
  }
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    return bad("dtype",
               absl::StrCat("is '", dtype, "'; must be one of float32, bfloat16, float16"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RewardModelOptions> parse_reward_model_options(const RewardSpec& spec) {
  ParamReader r(spec);
  RewardModelOptions o;
  o.path = r.string("path", "");
  o.batch_size = r.integer("batch_size", o.batch_size, 1, 1 << 16);
  o.max_length =
      r.integer("max_length", o.max_length, 0, model::ModelConfig::kMaxPositionEmbeddings);
  o.chat_template = r.string("chat_template", o.chat_template);
  o.normalize = r.boolean("normalize", o.normalize);
  o.clip = r.number_in("clip", o.clip, 0, kMaxClip);
  o.dtype = r.choice("dtype", o.dtype, {"float32", "bfloat16", "float16"});
  o.device = r.string("device", o.device);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (o.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reward '", spec.name, "': option 'path' is required (the checkpoint directory)"));
  }
  auto relative = [&](const std::string& p) {
    return fs::path(p).is_relative() && !spec.config_dir.empty()
               ? (fs::path(spec.config_dir) / p).string()
               : p;
  };
  o.path = relative(o.path);
  if (o.chat_template != "none" && o.chat_template != "auto" &&
      !model::ChatTemplate::by_name(o.chat_template).ok()) {
    o.chat_template = relative(o.chat_template);  // a directory
  }
  FLYWHEEL_RETURN_IF_ERROR(o.validate());
  return o;
}

struct RewardModel::State {
  RewardModelOptions options;
  std::unique_ptr<SequenceClassifier> classifier;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::optional<model::ChatTemplate> chat_template;
  int64_t max_length = 0;

  mutable absl::Mutex forward_mu;  // one forward pass at a time

  mutable absl::Mutex stats_mu;
  mutable int64_t count ABSL_GUARDED_BY(stats_mu) = 0;
  mutable double mean ABSL_GUARDED_BY(stats_mu) = 0;
  mutable double m2 ABSL_GUARDED_BY(stats_mu) = 0;  // Welford: sum of squared deviations
};

RewardModel::RewardModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
RewardModel::~RewardModel() = default;

absl::StatusOr<std::unique_ptr<RewardModel>> RewardModel::create(
    const RewardModelOptions& options) {
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  auto state = std::make_unique<State>();
  state->options = options;
  FLYWHEEL_ASSIGN_OR_RETURN(ScoringModel loaded,
                            load_scoring_model(options.path, options.dtype, options.device,
                                               SequenceClassifier::Head::kSequence, kName));
  state->classifier = std::move(loaded.classifier);
  state->tokenizer = std::move(loaded.tokenizer);
  absl::StatusOr<std::optional<model::ChatTemplate>> chat =
      resolve_template(options.chat_template, options.path);
  if (!chat.ok()) {
    return absl::Status(chat.status().code(),
                        absl::StrCat(options.path, ": chat_template '", options.chat_template,
                                     "': ", chat.status().message()));
  }
  state->chat_template = std::move(*chat);
  const int64_t positions = state->classifier->config().max_position_embeddings;
  state->max_length =
      options.max_length == RewardModelOptions::kModelMaxLength ? positions : options.max_length;
  if (state->max_length > positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward '", kName, "': option 'max_length' is ", options.max_length,
                     "; the model at ", options.path, " has max_position_embeddings ", positions));
  }
  return std::unique_ptr<RewardModel>(new RewardModel(std::move(state)));
}

const model::DecoderModel& RewardModel::decoder() const { return state_->classifier->decoder(); }
const RewardModelOptions& RewardModel::options() const { return state_->options; }

RewardModelStats RewardModel::stats() const {
  absl::MutexLock lock(&state_->stats_mu);
  RewardModelStats s;
  s.count = state_->count;
  s.mean = state_->mean;
  s.stddev = state_->count > 0 ? std::sqrt(state_->m2 / state_->count) : 0.0;
  return s;
}

absl::StatusOr<std::vector<int64_t>> RewardModel::tokenize(const RewardInput& input) const {
  const State& s = *state_;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.record_name, ": reward '", kName, "': ", why));
  };
  std::string text;
  model::EncodeOptions encode;
  if (s.chat_template) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> messages, conversation(input));
    absl::StatusOr<std::string> rendered =
        s.chat_template->render(messages, /*add_generation_prompt=*/false);
    if (!rendered.ok()) return bad(rendered.status().message());
    text = std::move(*rendered);
    encode.add_special_tokens = false;  // the template holds them, as in transformers
  } else {
    text = absl::StrCat(core::utf8_lossy(input.prompt), core::utf8_lossy(input.completion));
  }
  absl::StatusOr<std::vector<int64_t>> ids = s.tokenizer->encode(text, encode);
  if (!ids.ok()) return bad(ids.status().message());
  if (ids->empty()) return bad("nothing to score: the prompt and the completion are empty");
  const int64_t vocab = s.classifier->config().vocab_size;
  for (int64_t id : *ids) {
    if (id < 0 || id >= vocab) {
      return bad(absl::StrCat("the tokenizer gave id ", id, ", outside the model's vocabulary [0, ",
                              vocab, "): the tokenizer does not match the model at ",
                              s.options.path));
    }
  }
  const int64_t n = static_cast<int64_t>(ids->size());
  if (n > s.max_length) {
    // Drop the start (the prompt's beginning); keep a leading special token such as BOS.
    const bool keep_first = s.max_length > 1 && s.tokenizer->is_special((*ids)[0]);
    std::vector<int64_t> kept;
    kept.reserve(s.max_length);
    if (keep_first) kept.push_back((*ids)[0]);
    kept.insert(kept.end(), ids->end() - (s.max_length - (keep_first ? 1 : 0)), ids->end());
    *ids = std::move(kept);
  }
  return ids;
}

absl::StatusOr<RewardOutput> RewardModel::score(const RewardInput& input) const {
  std::vector<absl::StatusOr<RewardOutput>> out = score_batch({input});
  return std::move(out.front());
}

std::vector<absl::StatusOr<RewardOutput>> RewardModel::score_batch(
    const std::vector<RewardInput>& inputs) const {
  const State& s = *state_;
  const size_t n = inputs.size();
  std::vector<absl::StatusOr<RewardOutput>> out(n, absl::UnknownError("not scored"));
  std::vector<std::vector<int64_t>> ids(n);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<std::vector<int64_t>> t = tokenize(inputs[i]);
    if (!t.ok()) {
      out[i] = t.status();
      continue;
    }
    ids[i] = std::move(*t);
    order.push_back(i);
  }
  std::vector<double> raw(n);
  std::vector<size_t> scored;
  for (const std::vector<size_t>& batch :
       model::length_sorted_batches(ids, order, s.options.batch_size)) {
    std::vector<const std::vector<int64_t>*> rows;
    for (size_t i : batch) rows.push_back(&ids[i]);
    std::string error;
    try {
      absl::MutexLock lock(&s.forward_mu);
      std::vector<double> values = s.classifier->scores(rows);
      for (size_t k = 0; k < batch.size(); ++k) {
        raw[batch[k]] = values[k];
        scored.push_back(batch[k]);
      }
    } catch (const std::exception& e) {
      error = model::exception_message(e);
    }
    if (!error.empty()) {
      for (size_t i : batch) {
        out[i] = absl::InternalError(
            absl::StrCat(inputs[i].record_name, ": reward '", kName, "': forward failed: ", error));
      }
    }
  }
  std::sort(scored.begin(), scored.end());
  double mean = 0, stddev = 1;
  if (s.options.normalize && !scored.empty()) {
    absl::MutexLock lock(&s.stats_mu);
    for (size_t i : scored) {
      ++s.count;
      const double delta = raw[i] - s.mean;
      s.mean += delta / s.count;
      s.m2 += delta * (raw[i] - s.mean);
    }
    mean = s.mean;
    stddev = std::max(std::sqrt(s.m2 / s.count), kMinStddev);
  }
  for (size_t i : scored) {
    RewardOutput o;
    o.components["raw"] = raw[i];
    o.score = s.options.normalize ? (raw[i] - mean) / stddev : raw[i];
    if (s.options.clip > 0) o.score = std::clamp(o.score, -s.options.clip, s.options.clip);
    out[i] = std::move(o);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RewardFunction>> make_reward_model(const RewardSpec& spec) {
  FLYWHEEL_ASSIGN_OR_RETURN(RewardModelOptions options, parse_reward_model_options(spec));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<RewardModel> model, RewardModel::create(options));
  return std::unique_ptr<RewardFunction>(std::move(model));
}

absl::Status register_reward_model(core::PluginRegistry& registry) {
  return registry.get<RewardFunction, const RewardSpec&>().add(kName, &make_reward_model);
}

}  // namespace flywheel::rewards
