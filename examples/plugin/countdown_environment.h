// An example environment: the episode lasts `turns` model turns (param, default 3); each turn is
// answered "N more" (N turns left), and the turn that counts down to 0 ends the episode with
// reward 1 when it says "done".
#pragma once

#include <cstdint>
#include <memory>

#include "flywheel/rollout/environment.h"

namespace flywheel_example {

class CountdownEnvironment : public flywheel::rollout::Environment {
 public:
  static absl::StatusOr<std::unique_ptr<flywheel::rollout::Environment>> create(
      const flywheel::rollout::EnvironmentSpec& spec);

  absl::StatusOr<flywheel::rollout::EpisodeStart> reset(
      const flywheel::core::Json& record) const override;
  absl::StatusOr<flywheel::rollout::EnvironmentStep> step(
      flywheel::rollout::EpisodeState* state,
      const flywheel::rollout::ModelTurn& turn) const override;

 private:
  explicit CountdownEnvironment(int64_t turns) : turns_(turns) {}
  int64_t turns_;
};

}  // namespace flywheel_example
