#include "flywheel/trainer/learner_weights.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"

namespace flywheel::trainer {

absl::Status load_or_init(ShardedDecoder& model,
                          const absl::StatusOr<model::DecoderModel::TensorLookup>& weights,
                          const std::string& path, uint64_t seed) {
  if (weights.ok()) return model.load(*weights);
  if (model.has_adapters()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer.lora trains adapters on frozen base weights, but ", path,
                     " holds none (", weights.status().message(),
                     "): point model.path at a trained model, or set trainer.lora.rank to 0"));
  }
  if (model.comm().rank() == 0) {
    FLYWHEEL_LOG_INFO("no weights in %s (%s): starting from a random initialisation (seed %d)",
                      path, weights.status().message(), seed);
  }
  model.init_random(seed);
  return absl::OkStatus();
}

absl::Status load_value_model(ShardedDecoder& model, const std::string& path, uint64_t seed) {
  absl::StatusOr<model::DecoderModel::TensorLookup> body = model::open_hf_weights(path);
  if (!body.ok()) return load_or_init(model, body, path, seed);
  const int64_t hidden_size = model.config().hidden_size;
  return model.load(
      [inner = *body, hidden_size](const std::string& name) -> absl::StatusOr<at::Tensor> {
        absl::StatusOr<at::Tensor> t = inner(name);
        if (!t.ok() && name == "score.weight") return at::zeros({1, hidden_size});
        return t;
      });
}

absl::Status load_learner_weights(Learner& learner, const LearnerWeightSources& sources) {
  FLYWHEEL_RETURN_IF_ERROR(
      load_or_init(learner.policy(), sources.policy, sources.policy_path, sources.seed));
  if (ShardedDecoder* reference = learner.reference()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> ref =
        model::open_hf_weights(sources.reference_path);
    if (ref.ok()) {
      absl::Status loaded = reference->load(*ref);
      if (!loaded.ok()) return loaded;
    } else {
      reference->init_random(sources.seed);
    }
  }
  if (ShardedDecoder* teacher = learner.teacher()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> weights =
        model::open_hf_weights(sources.teacher_path);
    absl::Status loaded = weights.ok() ? teacher->load(*weights) : weights.status();
    if (!loaded.ok()) {
      return absl::Status(loaded.code(), absl::StrCat("distill.teacher_path: ", loaded.message()));
    }
  }
  if (ShardedDecoder* critic = learner.critic()) {
    FLYWHEEL_RETURN_IF_ERROR(load_value_model(*critic, sources.critic_path, sources.seed));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::trainer
