#include "flywheel/core/options/environment_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, EnvironmentOptions& o) {
  b.field("name", &o.name,
          FieldInfo("Environment registry name for multi-turn episodes. Empty: single-turn (the "
                    "only kind implemented yet; any other value is refused)."));
  b.field("max_turns", &o.max_turns, FieldInfo("Model turns per episode.").min(1));
  b.field("step_timeout_s", &o.step_timeout_s,
          FieldInfo("Deadline of one environment step in seconds.").greater_than(0));
  b.field("params", &o.params, FieldInfo("String parameters passed to the environment."));
}

}  // namespace flywheel::core
