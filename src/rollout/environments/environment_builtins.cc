#include "environments/calculator_environment.h"
#include "environments/guess_number_environment.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rollout/environment.h"

namespace flywheel::rollout {

absl::Status register_environment_builtins(core::PluginRegistry& registry) {
  auto& environments = registry.get<Environment, const EnvironmentSpec&>();
  FLYWHEEL_RETURN_IF_ERROR(environments.add("calculator", &CalculatorEnvironment::create));
  return environments.add("guess_number", &GuessNumberEnvironment::create);
}

}  // namespace flywheel::rollout
