// `guess_number`: a hidden integer in [1, max]. Each turn the model guesses (the last integer
// in its turn); the environment answers "higher", "lower" or "correct" (which ends the episode).
// Finding it earns reward_correct - turn_penalty per earlier turn (never below 0); a turn
// without a number is answered "guess an integer from 1 to max" and earns nothing.
//
// The hidden number is the record's `target` when it has one (an integer in [1, max]); else it
// is drawn from a hash of the record, so every sample of a group plays the same number.
//
// params: max (default 100), reward_correct (1), turn_penalty (0.1).
#pragma once

#include <cstdint>
#include <memory>

#include "flywheel/rollout/environment.h"

namespace flywheel::rollout {

struct GuessNumberOptions {
  int64_t max = 100;
  double reward_correct = 1.0;
  double turn_penalty = 0.1;
};

class GuessNumberEnvironment : public Environment {
 public:
  static absl::StatusOr<std::unique_ptr<Environment>> create(const EnvironmentSpec& spec);

  absl::StatusOr<EpisodeStart> reset(const core::Json& record) const override;
  absl::StatusOr<EnvironmentStep> step(EpisodeState* state, const ModelTurn& turn) const override;

 private:
  explicit GuessNumberEnvironment(const GuessNumberOptions& options) : options_(options) {}

  GuessNumberOptions options_;
};

}  // namespace flywheel::rollout
