// `rewards:` — reward functions (built-in or plugin), combined as a weighted sum.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct RewardFunctionOptions {
  std::string name;   // registry name, e.g. exact_match, math or a plugin's
  std::string label;  // metric prefix; "" = name (set it to use one function twice)
  double weight = 1.0;
  std::map<std::string, std::string> params;  // passed to the reward's factory
};

struct RewardsOptions {
  std::vector<RewardFunctionOptions> functions;
  double timeout_s = 10.0;      // per-call scoring deadline; a timeout scores the fallback
  double fallback_score = 0.0;  // a function's score when it fails or times out
  int64_t workers = 2;          // scoring threads
  int64_t queue_size = 4096;    // calls waiting for a thread before submitters block

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, RewardFunctionOptions& o);
void bind_options(FieldBinder& b, RewardsOptions& o);

}  // namespace flywheel::core
