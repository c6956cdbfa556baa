// A learner's starting weights: the policy's, the reference's (KL) and the critic's (gae), each
// from a Hugging Face directory when there is one, else a seeded random initialisation.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"
#include "flywheel/trainer/learner.h"

namespace flywheel::trainer {

struct LearnerWeightSources {
  // The policy's weights, opened already (the caller checks them against the model's config
  // before the learner is allocated); an error means a random initialisation.
  absl::StatusOr<model::DecoderModel::TensorLookup> policy = absl::NotFoundError("no weights");
  std::string policy_path;     // named in the message of a random initialisation
  std::string reference_path;  // model.reference_path, else model.path
  // model.critic_path, else model.path: the policy's body with a zero value head.
  std::string critic_path;
  std::string teacher_path;  // distill.teacher_path: must load (no random teacher)
  uint64_t seed = 0;         // trainer.seed
};

// `model` from `weights` when they opened, else a random initialisation from `seed` (rank 0 says
// so, naming `path` and why). Collective.
absl::Status load_or_init(ShardedDecoder& model,
                          const absl::StatusOr<model::DecoderModel::TensorLookup>& weights,
                          const std::string& path, uint64_t seed);

// A value-head decoder (a critic, a reward model) from the Hugging Face directory `path`: a
// policy's body with a zero head when it has no "score.weight", a sequence classifier's as it
// is; a random initialisation from `seed` when nothing opens there (rank 0 says so). Collective.
absl::Status load_value_model(ShardedDecoder& model, const std::string& path, uint64_t seed);

// Loads (or initialises) every model `learner` holds. Collective (sharded loads).
absl::Status load_learner_weights(Learner& learner, const LearnerWeightSources& sources);

}  // namespace flywheel::trainer
