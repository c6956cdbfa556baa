// `environment:` — multi-turn (agentic) episodes; "" = single-turn generation.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct EnvironmentOptions {
  std::string name;       // registry name; "" = single-turn
  int64_t max_turns = 1;  // model turns per episode
  double step_timeout_s = 30.0;
  std::map<std::string, std::string> params;  // passed to the environment's factory
};

void bind_options(FieldBinder& b, EnvironmentOptions& o);

}  // namespace flywheel::core
