#include "sequence_classifier.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/Device.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/padded_rows.h"
#include "flywheel/model/torch_error.h"

namespace flywheel::rewards {
namespace {

namespace fs = std::filesystem;

// What each head is called: the architecture's suffix, the reward that loads it.
struct HeadNames {
  const char* suffix;
  const char* reward;
  const char* what;
};
HeadNames names(SequenceClassifier::Head head) {
  if (head == SequenceClassifier::Head::kToken) {
    return {"ForTokenClassification", "process_reward_model", "token-classification"};
  }
  return {"ForSequenceClassification", "reward_model", "sequence-classification"};
}

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
    const std::string& dir, const model::DecoderOptions& options, Head head) {
  const HeadNames kind = names(head);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "reward model '", dir, "' is not a directory (a Hugging Face ", kind.what, " checkpoint)"));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(core::Json json, core::read_json_file(config_path));
  if (const core::Json* archs = json.find("architectures"); archs != nullptr && archs->is_array()) {
    std::vector<std::string> names;
    bool classifier = false;
    for (const core::Json& a : archs->as_array()) {
      if (!a.is_string()) continue;
      names.push_back(a.as_string());
      classifier |= absl::EndsWith(a.as_string(), kind.suffix);
    }
    if (!classifier) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": architectures is [", absl::StrJoin(names, ", "), "]: not a ",
                       kind.what, " checkpoint (", kind.reward, " needs Qwen2", kind.suffix,
                       ", Qwen3", kind.suffix, " or Llama", kind.suffix, " with num_labels 1)"));
    }
  }
  if (std::optional<int64_t> labels = declared_labels(json); labels && *labels != 1) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": num_labels is ", *labels, "; ",
                                                   kind.reward,
                                                   " needs num_labels 1 (one scalar score)"));
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
    return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor 'score.weight' has ",
                                                   score->size(0), " rows (labels); ", kind.reward,
                                                   " needs num_labels 1 (one scalar score)"));
  }
  absl::StatusOr<at::Tensor> bias = (weights)("score.bias");
  if (bias.ok() && head == Head::kSequence) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir,
                     ": the checkpoint has 'score.bias'; a Hugging Face sequence-"
                     "classification head has none and reward_model does not read one"));
  }
  if (bias.ok()) {
    if (bias->numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": tensor 'score.bias' has ", bias->numel(), " values; num_labels 1 needs 1"));
    }
    c->score_bias_ = bias->to(at::kDouble).item<double>();
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

std::vector<std::vector<double>> SequenceClassifier::values_at(
    const std::vector<const std::vector<int64_t>*>& rows,
    const std::vector<std::vector<int64_t>>& read) const {
  const at::Tensor hidden = model::hidden_states(*decoder_, rows);  // [B, T, H]
  const at::Tensor out =
      (at::matmul(hidden, score_weight_.t()).squeeze(-1).to(at::kCPU, at::kDouble) + score_bias_)
          .contiguous();  // [B, T]
  auto values = out.accessor<double, 2>();
  std::vector<std::vector<double>> result(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    for (int64_t t : read[b]) result[b].push_back(values[b][t]);
  }
  return result;
}

absl::StatusOr<ScoringModel> load_scoring_model(const std::string& dir, const std::string& dtype,
                                                const std::string& device,
                                                SequenceClassifier::Head head,
                                                const std::string& reward) {
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType scalar, model::parse_dtype(dtype));
  std::optional<at::Device> where;
  try {
    where = at::Device(device);
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(absl::StrCat("reward '", reward, "': option 'device' is '",
                                                   device, "'; must be cpu, cuda or cuda:<index>"));
  }
  if (where->is_cuda() && !at::hasCUDA()) {
    return absl::FailedPreconditionError(absl::StrCat("reward '", reward, "': device '", device,
                                                      "' but no CUDA device is available"));
  }
  ScoringModel out;
  try {
    absl::StatusOr<std::unique_ptr<SequenceClassifier>> classifier =
        SequenceClassifier::load(dir, model::DecoderOptions{scalar, *where}, head);
    if (!classifier.ok()) return classifier.status();
    out.classifier = std::move(*classifier);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(dir, ": loading the ", reward, " failed: ", model::exception_message(e)));
  }
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::load_tokenizer(dir);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat(dir, ": the ", reward, "'s tokenizer: ", tokenizer.status().message()));
  }
  out.tokenizer = std::move(*tokenizer);
  return out;
}

}  // namespace flywheel::rewards
