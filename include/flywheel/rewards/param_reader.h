// A reward function's `params`, read strictly (core::ParamReader), with errors that start
// "reward '<name>'".
//
//   ParamReader r(spec);
//   options.tolerance = r.number("tolerance", 1e-6);
//   options.fallback_to_last_number = r.boolean("fallback_to_last_number", false);
//   FLYWHEEL_RETURN_IF_ERROR(r.finish());
#pragma once

#include <map>
#include <string>

#include "flywheel/core/param_reader.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards {

class ParamReader : public core::ParamReader {
 public:
  explicit ParamReader(const RewardSpec& spec) : ParamReader(spec.name, spec.params) {}
  ParamReader(const std::string& function, std::map<std::string, std::string> params)
      : core::ParamReader("reward '" + function + "'", std::move(params)) {}
};

}  // namespace flywheel::rewards
