#include "flywheel/trainer/step_data.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/step_tokens.h"

namespace flywheel::trainer {
namespace {

// One record as an example; errors say what is wrong with it.
absl::StatusOr<StepExample> read_example(const core::Json& record, const StepDataOptions& o,
                                         const model::Tokenizer& tokenizer) {
  if (!record.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  const core::Json* prompt = record.find(o.prompt_key);
  if (prompt == nullptr || !prompt->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", o.prompt_key, "\" must be a string"));
  }
  const core::Json* steps = record.find(o.steps_key);
  const core::Json* labels = record.find(o.labels_key);
  if (steps == nullptr || !steps->is_array() || labels == nullptr || !labels->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", o.steps_key, "\" and \"", o.labels_key,
                                                   "\" must be lists (the steps, their labels)"));
  }
  if (steps->as_array().size() != labels->as_array().size() || steps->as_array().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", o.steps_key, "\" has ", steps->as_array().size(), " steps and \"",
                     o.labels_key, "\" ", labels->as_array().size(),
                     " labels; they need one label per step, and a step at least"));
  }
  std::vector<std::string> texts;
  StepExample e;
  for (size_t k = 0; k < steps->as_array().size(); ++k) {
    const core::Json& step = steps->as_array()[k];
    const core::Json& label = labels->as_array()[k];
    if (!step.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", o.steps_key, "\"[", k, "] must be a string"));
    }
    texts.push_back(step.as_string());
    if (label.is_bool()) {
      e.labels.push_back(label.as_bool() ? 1.0f : 0.0f);
    } else if (label.is_integer() && (label.as_int() == 0 || label.as_int() == 1)) {
      e.labels.push_back(static_cast<float>(label.as_int()));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("\"", o.labels_key, "\"[", k, "] is ",
                                                     label.dump(), "; labels are true / false"));
    }
  }
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::StepTokens tokens,
      model::encode_steps(tokenizer, prompt->as_string(), texts, o.separator));
  if (tokens.prompt_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("\"", o.prompt_key, "\" has no token"));
  }
  for (size_t i = 0; i < tokens.ids.size(); ++i) {
    const int64_t id = tokens.ids[i];
    if (id < 0 || id >= o.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer gave id ", id, ", outside the vocabulary [0, ", o.vocab_size, ")"));
    }
    auto& to = static_cast<int64_t>(i) < tokens.prompt_tokens ? e.prompt : e.steps;
    to.push_back(static_cast<int32_t>(id));
  }
  for (int64_t end : tokens.step_ends) {
    e.label_at.push_back(static_cast<int32_t>(end - tokens.prompt_tokens - 1));
  }
  return e;
}

}  // namespace

StepDataOptions StepDataOptions::from_config(const core::Config& config, int64_t vocab_size) {
  StepDataOptions o;
  o.prompt_key = config.data.prompt_key;
  o.steps_key = config.rm.steps_key;
  o.labels_key = config.rm.labels_key;
  o.separator = config.rm.separator;
  o.max_tokens = config.model.max_seq_len;
  o.vocab_size = vocab_size;
  return o;
}

absl::StatusOr<StepData> load_step_data(const std::string& path, const StepDataOptions& options,
                                        const model::Tokenizer& tokenizer) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlReader> in, core::JsonlReader::open(path));
  StepData data;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = in->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    absl::StatusOr<StepExample> e = read_example(**line, options, tokenizer);
    if (!e.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(in->where(), ": ", e.status().message()));
    }
    // The learner reads a step's label with the token after it as input: one position more.
    if (static_cast<int64_t>(e->prompt.size() + e->steps.size()) + 1 > options.max_tokens) {
      ++data.skipped_too_long;
      continue;
    }
    data.steps += static_cast<int64_t>(e->labels.size());
    for (float label : e->labels) data.positive += label > 0.5f ? 1 : 0;
    data.examples.push_back(std::move(*e));
  }
  if (data.examples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no usable records (", data.skipped_too_long, " too long)"));
  }
  return data;
}

}  // namespace flywheel::trainer
