#include "countdown_environment.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/param_reader.h"

namespace flywheel_example {

using flywheel::rollout::EnvironmentStep;
using flywheel::rollout::EpisodeStart;

absl::StatusOr<std::unique_ptr<flywheel::rollout::Environment>> CountdownEnvironment::create(
    const flywheel::rollout::EnvironmentSpec& spec) {
  flywheel::core::ParamReader r(absl::StrCat("environment '", spec.name, "'"), spec.params);
  const int64_t turns = r.integer("turns", 3, 1, 1000);
  absl::Status s = r.finish();
  if (!s.ok()) return s;
  return std::unique_ptr<flywheel::rollout::Environment>(new CountdownEnvironment(turns));
}

// Stateless: a turn's index says how many are left.
absl::StatusOr<EpisodeStart> CountdownEnvironment::reset(const flywheel::core::Json&) const {
  return EpisodeStart{};
}

absl::StatusOr<EnvironmentStep> CountdownEnvironment::step(
    flywheel::rollout::EpisodeState*, const flywheel::rollout::ModelTurn& turn) const {
  EnvironmentStep out;
  const int64_t left = turns_ - turn.index - 1;
  if (left == 0) {
    out.done = true;
    out.reward = absl::StrContains(turn.text, "done") ? 1.0 : 0.0;
    return out;
  }
  out.observation.text = absl::StrCat(" ", left, " more ");
  return out;
}

}  // namespace flywheel_example
