#include "flywheel/rewards/model/process_reward_model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/utf8.h"
#include "flywheel/model/padded_rows.h"
#include "flywheel/model/tokenizer/step_tokens.h"
#include "flywheel/model/torch_error.h"
#include "flywheel/rewards/param_reader.h"
#include "sequence_classifier.h"

namespace flywheel::rewards {
namespace {

namespace fs = std::filesystem;

constexpr char kName[] = "process_reward_model";

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The index just past the completion token where each text offset in `ends` is reached:
// decoding ids[0, j) gives at least ends[k] bytes. Empty when `tokenizer` does not decode `ids`
// to `completion` (another tokenizer than the policy's).
std::vector<int32_t> token_ends(const model::Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                                absl::string_view completion, const std::vector<size_t>& ends) {
  absl::StatusOr<std::string> whole = tokenizer.decode(ids);
  if (!whole.ok() || *whole != completion) return {};
  std::vector<int32_t> out;
  size_t lo_start = 1;
  for (size_t offset : ends) {
    size_t lo = lo_start, hi = ids.size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      absl::StatusOr<std::string> prefix =
          tokenizer.decode(std::vector<int64_t>(ids.begin(), ids.begin() + mid));
      if (prefix.ok() && prefix->size() >= offset) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (out.empty() || static_cast<int32_t>(lo) > out.back())
      out.push_back(static_cast<int32_t>(lo));
    lo_start = lo;
  }
  return out;
}

}  // namespace

absl::StatusOr<ProcessRewardModelOptions> parse_process_reward_model_options(
    const RewardSpec& spec) {
  ParamReader r(spec);
  ProcessRewardModelOptions o;
  o.path = r.string("path", "");
  o.separator = r.string("separator", o.separator);
  o.reduce = r.choice("reduce", o.reduce, {"steps", "min", "mean", "last"});
  o.batch_size = r.integer("batch_size", o.batch_size, 1, 1 << 16);
  o.max_length =
      r.integer("max_length", o.max_length, 0, model::ModelConfig::kMaxPositionEmbeddings);
  o.dtype = r.choice("dtype", o.dtype, {"float32", "bfloat16", "float16"});
  o.device = r.string("device", o.device);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (o.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reward '", spec.name, "': option 'path' is required (the checkpoint directory)"));
  }
  if (fs::path(o.path).is_relative() && !spec.config_dir.empty()) {
    o.path = (fs::path(spec.config_dir) / o.path).string();
  }
  return o;
}

struct ProcessRewardModel::State {
  ProcessRewardModelOptions options;
  ScoringModel model;
  int64_t max_length = 0;
  mutable absl::Mutex forward_mu;  // one forward pass at a time
};

// One sample ready for the forward pass.
struct ProcessRewardModel::Prepared {
  std::vector<int64_t> ids;              // moved out for the forward pass
  std::vector<int64_t> read;             // the token of each step's label
  std::vector<int32_t> completion_ends;  // each step's end among the completion's tokens
};

ProcessRewardModel::ProcessRewardModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
ProcessRewardModel::~ProcessRewardModel() = default;

absl::StatusOr<std::unique_ptr<ProcessRewardModel>> ProcessRewardModel::create(
    const ProcessRewardModelOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  FLYWHEEL_ASSIGN_OR_RETURN(state->model,
                            load_scoring_model(options.path, options.dtype, options.device,
                                               SequenceClassifier::Head::kToken, kName));
  const int64_t positions = state->model.classifier->config().max_position_embeddings;
  state->max_length = options.max_length == 0 ? positions : options.max_length;
  if (state->max_length > positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward '", kName, "': option 'max_length' is ", options.max_length,
                     "; the model at ", options.path, " has max_position_embeddings ", positions));
  }
  return std::unique_ptr<ProcessRewardModel>(new ProcessRewardModel(std::move(state)));
}

absl::StatusOr<ProcessRewardModel::Prepared> ProcessRewardModel::prepare(
    const RewardInput& input) const {
  const State& s = *state_;
  const model::Tokenizer& tokenizer = *s.model.tokenizer;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.record_name, ": reward '", kName, "': ", why));
  };
  std::vector<int64_t> completion(input.completion_ids.begin(), input.completion_ids.end());
  const std::string prompt = core::utf8_lossy(input.prompt);
  Prepared p;
  if (s.options.separator.empty()) {  // every token a step, read from the policy's own ids
    absl::StatusOr<std::vector<int64_t>> ids = tokenizer.encode(prompt);
    if (!ids.ok()) return bad(ids.status().message());
    p.ids = std::move(*ids);
    for (size_t i = 0; i < completion.size(); ++i) {
      p.ids.push_back(completion[i]);
      p.read.push_back(static_cast<int64_t>(p.ids.size()) - 1);
      p.completion_ends.push_back(static_cast<int32_t>(i + 1));
    }
  } else {
    const std::string text = core::utf8_lossy(input.completion);
    std::vector<model::TextStep> steps = model::split_steps(text, s.options.separator);
    std::vector<std::string> texts;
    std::vector<size_t> ends;
    for (model::TextStep& step : steps) {
      texts.push_back(std::move(step.text));
      ends.push_back(step.end);
    }
    absl::StatusOr<model::StepTokens> encoded =
        model::encode_steps(tokenizer, prompt, texts, s.options.separator);
    if (!encoded.ok()) return bad(encoded.status().message());
    p.ids = std::move(encoded->ids);
    for (int64_t end : encoded->step_ends) p.read.push_back(end - 1);
    if (s.options.reduce == "steps") {
      // The text's tokens: without the stop token(s) after it.
      while (!completion.empty() && tokenizer.is_special(completion.back())) completion.pop_back();
      p.completion_ends = token_ends(tokenizer, completion, input.completion, ends);
      if (p.completion_ends.size() != p.read.size()) p.completion_ends.clear();
    }
  }
  if (p.read.empty()) return bad("nothing to score: the completion has no step");
  const int64_t n = static_cast<int64_t>(p.ids.size());
  if (n > s.max_length) {
    return bad(absl::StrCat("the prompt and its steps take ", n, " tokens, over max_length ",
                            s.max_length));
  }
  const int64_t vocab = s.model.classifier->config().vocab_size;
  for (int64_t id : p.ids) {
    if (id < 0 || id >= vocab) {
      return bad(absl::StrCat("token id ", id, " is outside the model's vocabulary [0, ", vocab,
                              "): the PRM does not share the policy's tokenizer"));
    }
  }
  return p;
}

absl::StatusOr<RewardOutput> ProcessRewardModel::score(const RewardInput& input) const {
  std::vector<absl::StatusOr<RewardOutput>> out = score_batch({input});
  return std::move(out.front());
}

std::vector<absl::StatusOr<RewardOutput>> ProcessRewardModel::score_batch(
    const std::vector<RewardInput>& inputs) const {
  const State& s = *state_;
  const size_t n = inputs.size();
  std::vector<absl::StatusOr<RewardOutput>> out(n, absl::UnknownError("not scored"));
  std::vector<Prepared> prepared(n);
  std::vector<std::vector<int64_t>> ids(n);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<Prepared> p = prepare(inputs[i]);
    if (!p.ok()) {
      out[i] = p.status();
      continue;
    }
    prepared[i] = std::move(*p);
    ids[i] = std::move(prepared[i].ids);
    order.push_back(i);
  }
  for (const std::vector<size_t>& batch :
       model::length_sorted_batches(ids, order, s.options.batch_size)) {
    std::vector<const std::vector<int64_t>*> rows;
    std::vector<std::vector<int64_t>> read;
    for (size_t i : batch) {
      rows.push_back(&ids[i]);
      read.push_back(prepared[i].read);
    }
    std::vector<std::vector<double>> values;
    std::string error;
    try {
      absl::MutexLock lock(&s.forward_mu);
      values = s.model.classifier->values_at(rows, read);
    } catch (const std::exception& e) {
      error = model::exception_message(e);
    }
    for (size_t k = 0; k < batch.size(); ++k) {
      const size_t i = batch[k];
      if (!error.empty()) {
        out[i] = absl::InternalError(
            absl::StrCat(inputs[i].record_name, ": reward '", kName, "': forward failed: ", error));
        continue;
      }
      std::vector<double> p;
      for (double v : values[k]) p.push_back(sigmoid(v));
      const double K = static_cast<double>(p.size());
      double mean = 0, low = 1;
      for (double x : p) {
        mean += x / K;
        low = std::min(low, x);
      }
      if (!std::isfinite(mean)) {
        out[i] = absl::InternalError(absl::StrCat(inputs[i].record_name, ": reward '", kName,
                                                  "': the head's output is not finite"));
        continue;
      }
      RewardOutput o;
      o.components = {{"steps", K}, {"min", low}, {"mean", mean}};
      const std::string& reduce = s.options.reduce;
      o.score = reduce == "min" ? low : reduce == "last" ? p.back() : mean;
      if (reduce == "steps") {
        const std::vector<int32_t>& ends = prepared[i].completion_ends;
        o.components["placed"] = ends.empty() ? 0 : 1;
        for (size_t j = 0; j < ends.size(); ++j) {
          o.step_ends.push_back(ends[j]);
          o.step_rewards.push_back(p[j] / K);
        }
      }
      out[i] = std::move(o);
    }
  }
  return out;
}

absl::Status register_process_reward_model(core::PluginRegistry& registry) {
  return registry.get<RewardFunction, const RewardSpec&>().add(
      kName, [](const RewardSpec& spec) -> absl::StatusOr<std::unique_ptr<RewardFunction>> {
        FLYWHEEL_ASSIGN_OR_RETURN(ProcessRewardModelOptions options,
                                  parse_process_reward_model_options(spec));
        FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<ProcessRewardModel> prm,
                                  ProcessRewardModel::create(options));
        return std::unique_ptr<RewardFunction>(std::move(prm));
      });
}

}  // namespace flywheel::rewards
