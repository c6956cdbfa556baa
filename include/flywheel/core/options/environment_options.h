// `environment:` — multi-turn (agentic) episodes; "" = single-turn generation.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct EnvironmentOptions {
  std::string name;                       // registry name; "" = single-turn
  int64_t max_turns = 4;                  // model turns per episode
  int64_t turn_max_new_tokens = 0;        // tokens of one model turn; 0: rollout.max_new_tokens
  int64_t max_observation_tokens = 1024;  // an environment's reply, once tokenized
  double step_timeout_s = 30.0;
  double turn_discount = 1.0;  // gae / reinforce_pp: discount from one model turn to the next
  std::map<std::string, std::string> params;  // passed to the environment's factory
};

void bind_options(FieldBinder& b, EnvironmentOptions& o);

}  // namespace flywheel::core
