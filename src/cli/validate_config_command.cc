// `flywheel validate-config FILE [--set key=value]...`: prints the resolved config or the errors.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/jobs/job_setup.h"

namespace flywheel::cli {
namespace {

struct ValidateArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool no_plugins = false;
};

int run_validate(const ValidateArgs& args) {
  absl::StatusOr<jobs::JobSetup> job =
      jobs::set_up_job(args.config_path, args.overrides, !args.no_plugins);
  if (!job.ok()) {
    std::cerr << "flywheel: invalid configuration:\n" << job.status().message() << "\n";
    return kExitUsage;
  }
  if (!args.quiet) {
    std::cout << "# resolved from: ";
    for (size_t i = 0; i < job->loaded.files.size(); ++i) {
      std::cout << (i ? ", " : "") << job->loaded.files[i];
    }
    for (const std::string& o : args.overrides) std::cout << ", --set " << o;
    std::cout << "\n" << core::format_config_yaml(job->loaded.config);
  }
  std::cerr << "flywheel: " << args.config_path << " is valid\n";
  return kExitOk;
}

}  // namespace

void add_validate_config_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* command = app.add_subcommand(
      "validate-config",
      "Check a config file (includes, --set overrides, plugins and the names they register) and "
      "print the fully resolved config, algorithm preset expanded; exit code 2 on errors");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command
      ->add_option("--set", args->overrides,
                   "Override a key: --set trainer.lr=1e-5 (repeatable; value is YAML)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->add_flag("-q,--quiet", args->quiet, "Print nothing but errors");
  command->add_flag("--no-plugins", args->no_plugins,
                    "Do not load the config's plugins (and do not check the names they provide)");
  command->callback([args, exit_code] { *exit_code = run_validate(*args); });
}

}  // namespace flywheel::cli
