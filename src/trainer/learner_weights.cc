#include "flywheel/trainer/learner_weights.h"

#include <ATen/ATen.h>

#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"

namespace flywheel::trainer {

absl::Status load_or_init(ShardedDecoder& model,
                          const absl::StatusOr<model::DecoderModel::TensorLookup>& weights,
                          const std::string& path, uint64_t seed) {
  if (weights.ok()) return model.load(*weights);
  if (model.comm().rank() == 0) {
    FLYWHEEL_LOG_INFO("no weights in %s (%s): starting from a random initialisation (seed %d)",
                      path, weights.status().message(), seed);
  }
  model.init_random(seed);
  return absl::OkStatus();
}

absl::Status load_learner_weights(Learner& learner, int64_t hidden_size,
                                  const LearnerWeightSources& sources) {
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
  if (ShardedDecoder* critic = learner.critic()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> body =
        model::open_hf_weights(sources.critic_path);
    if (body.ok()) {
      model::DecoderModel::TensorLookup lookup =
          [inner = *body, hidden_size](const std::string& name) -> absl::StatusOr<at::Tensor> {
        absl::StatusOr<at::Tensor> t = inner(name);
        if (!t.ok() && name == "score.weight") return at::zeros({1, hidden_size});
        return t;
      };
      FLYWHEEL_RETURN_IF_ERROR(critic->load(lookup));
    } else {
      critic->init_random(sources.seed);
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::trainer
