// Shared start-up of flywheel jobs: load the config, build the registries, load plugins.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/core/config_loader.h"
#include "flywheel/core/plugin_registry.h"

namespace flywheel::jobs {

struct JobSetup {
  core::LoadedConfig loaded;
  std::unique_ptr<core::PluginRegistry> registry;  // built-ins and the config's plugins

  // The directory of the config file (relative paths in rewards params resolve against it);
  // the working directory when the config came from no file.
  std::string config_dir() const;
};

// Loads `config_path` with `overrides`, expands the algorithm preset, registers the built-ins
// of every component, loads the config's plugins and checks that every component the config
// names exists. All errors are
// InvalidArgument or the plugin loader's status, with file and key in the message.
absl::StatusOr<JobSetup> set_up_job(const std::string& config_path,
                                    const std::vector<std::string>& overrides,
                                    bool load_plugins = true);

// MPI and the world communicator of a job whose every rank trains (`flywheel sft`, `dpo`): its
// collectives under cluster.collective_timeout_s, log lines prefixed `log_name` and the rank,
// cluster.threads_per_process intra-op threads.
struct TrainingWorld {
  std::unique_ptr<comm::MpiRuntime> mpi;
  std::unique_ptr<comm::Communicator> world;
};
absl::StatusOr<TrainingWorld> join_training_world(const core::Config& config,
                                                  const std::string& log_name);

}  // namespace flywheel::jobs
