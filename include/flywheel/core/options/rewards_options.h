// `rewards:` — reward functions (built-in or plugin), combined as a weighted sum.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct RewardFunctionOptions {
  std::string name;  // registry name, e.g. exact_match, math_answer or a plugin's
  double weight = 1.0;
  std::map<std::string, std::string> params;  // passed to the reward's factory
};

struct RewardsOptions {
  std::vector<RewardFunctionOptions> functions;
  double timeout_s = 10.0;  // per-sample scoring deadline; a timeout scores as an error

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, RewardFunctionOptions& o);
void bind_options(FieldBinder& b, RewardsOptions& o);

}  // namespace flywheel::core
