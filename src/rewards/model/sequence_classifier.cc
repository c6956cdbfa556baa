#include "sequence_classifier.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/padded_rows.h"

namespace flywheel::rewards {
namespace {

namespace fs = std::filesystem;

constexpr char kArchitectureSuffix[] = "ForSequenceClassification";

// The label count the config declares: num_labels, else the size of id2label; nullopt when it
// says neither (the rows of score.weight decide).
std::optional<int64_t> declared_labels(const core::Json& config) {
  if (const core::Json* n = config.find("num_labels"); n != nullptr && n->is_integer()) {
    return n->as_int();
  }
  if (const core::Json* labels = config.find("id2label");
      labels != nullptr && labels->is_object()) {
    return static_cast<int64_t>(labels->as_object().size());
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SequenceClassifier>> SequenceClassifier::load(
    const std::string& dir, const model::DecoderOptions& options) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("reward model '", dir,
                                            "' is not a directory (a Hugging Face "
                                            "sequence-classification checkpoint)"));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(core::Json json, core::read_json_file(config_path));
  if (const core::Json* archs = json.find("architectures"); archs != nullptr && archs->is_array()) {
    std::vector<std::string> names;
    bool classifier = false;
    for (const core::Json& a : archs->as_array()) {
      if (!a.is_string()) continue;
      names.push_back(a.as_string());
      classifier |= absl::EndsWith(a.as_string(), kArchitectureSuffix);
    }
    if (!classifier) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": architectures is [", absl::StrJoin(names, ", "),
                       "]: not a sequence-classification checkpoint (reward_model needs "
                       "Qwen2ForSequenceClassification, Qwen3ForSequenceClassification or "
                       "LlamaForSequenceClassification with num_labels 1)"));
    }
  }
  if (std::optional<int64_t> labels = declared_labels(json); labels && *labels != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": num_labels is ", *labels,
                     "; reward_model needs num_labels 1 (one scalar score)"));
  }
  absl::StatusOr<model::ModelConfig> config = model::ModelConfig::from_json(json, config_path);
  if (!config.ok()) return config.status();
  // The classifier has no lm_head: tie it to the embedding so that the decoder asks for none.
  config->tie_word_embeddings = true;

  std::unique_ptr<SequenceClassifier> c(new SequenceClassifier());
  if (const core::Json* pad = json.find("pad_token_id"); pad != nullptr && pad->is_integer()) {
    c->pad_token_id_ = pad->as_int();
  }
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> decoder =
      model::DecoderModel::create(*config, options);
  if (!decoder.ok()) {
    return absl::Status(decoder.status().code(),
                        absl::StrCat(config_path, ": ", decoder.status().message()));
  }
  c->decoder_ = std::move(*decoder);
  FLYWHEEL_ASSIGN_OR_RETURN(model::DecoderModel::TensorLookup weights, model::open_hf_weights(dir));
  absl::Status loaded = c->decoder_->load(weights);
  if (!loaded.ok()) return absl::Status(loaded.code(), absl::StrCat(dir, ": ", loaded.message()));

  absl::StatusOr<at::Tensor> score = (weights)("score.weight");
  if (!score.ok()) {
    if (!absl::IsNotFound(score.status())) return score.status();
    return absl::NotFoundError(
        absl::StrCat(dir,
                     ": checkpoint lacks tensors: score.weight (the classification head; is this a "
                     "causal-LM checkpoint?)"));
  }
  const int64_t hidden = config->hidden_size;
  if (score->dim() != 2 || score->size(1) != hidden) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor 'score.weight' has shape [",
                                                   absl::StrJoin(score->sizes(), ", "),
                                                   "] but the config needs [1, ", hidden, "]"));
  }
  if (score->size(0) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": tensor 'score.weight' has ", score->size(0),
                     " rows (labels); reward_model needs num_labels 1 (one scalar score)"));
  }
  if ((weights)("score.bias").ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir,
                     ": the checkpoint has 'score.bias'; a Hugging Face sequence-"
                     "classification head has none and reward_model does not read one"));
  }
  c->score_weight_ = score->to(options.device, options.dtype).contiguous();
  return c;
}

int64_t SequenceClassifier::read_position(const std::vector<int64_t>& ids) const {
  if (!pad_token_id_) return static_cast<int64_t>(ids.size()) - 1;
  for (int64_t i = static_cast<int64_t>(ids.size()) - 1; i >= 0; --i) {
    if (ids[i] != *pad_token_id_) return i;
  }
  return 0;
}

std::vector<double> SequenceClassifier::scores(
    const std::vector<const std::vector<int64_t>*>& rows) const {
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<int64_t> read(B);
  for (int64_t b = 0; b < B; ++b) read[b] = read_position(*rows[b]);
  const at::Tensor last = model::hidden_at(*decoder_, rows, read);  // [B, H]
  // In the model dtype, as transformers computes the head.
  const at::Tensor out = at::matmul(last, score_weight_.t()).squeeze(-1).to(at::kCPU, at::kDouble);
  std::vector<double> result(B);
  auto values = out.accessor<double, 1>();
  for (int64_t b = 0; b < B; ++b) result[b] = values[b];
  return result;
}

}  // namespace flywheel::rewards
