#include "flywheel/core/options/rewards_options.h"

#include "absl/strings/str_cat.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, RewardFunctionOptions& o) {
  b.field("name", &o.name, FieldInfo("Reward registry name (built-in or from a plugin)."));
  b.field("weight", &o.weight, FieldInfo("Weight of this reward in the sum."));
  b.field("params", &o.params, FieldInfo("String parameters passed to the reward's factory."));
}

void bind_options(FieldBinder& b, RewardsOptions& o) {
  b.section_list("functions", &o.functions,
                 "Reward functions; the trajectory reward is their weighted sum.");
  b.field("timeout_s", &o.timeout_s,
          FieldInfo("Per-sample scoring deadline in seconds.").greater_than(0));
}

absl::Status RewardsOptions::validate() const {
  for (size_t i = 0; i < functions.size(); ++i) {
    if (functions[i].name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("functions[", i, "].name: must be set"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
