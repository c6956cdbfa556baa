#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::shared_ptr<const Environment>> make_environment(
    const core::EnvironmentOptions& options, core::PluginRegistry& registry,
    const std::string& config_dir) {
  if (options.name.empty()) return std::shared_ptr<const Environment>();
  auto& environments = registry.get<Environment, const EnvironmentSpec&>();
  absl::StatusOr<std::unique_ptr<Environment>> made =
      environments.create(options.name, {options.name, options.params, config_dir});
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat("environment.name: ", made.status().message()));
  }
  return std::shared_ptr<const Environment>(std::move(*made));
}

}  // namespace flywheel::rollout
