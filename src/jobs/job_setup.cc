#include "flywheel/jobs/job_setup.h"

#include <ATen/Parallel.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "flywheel/algos/algorithm.h"
#include "flywheel/algos/presets.h"
#include "flywheel/comm/mpmd.h"
#include "flywheel/core/builtins.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/rewards/builtins.h"
#include "flywheel/rewards/model/process_reward_model.h"
#include "flywheel/rewards/model/reward_model.h"
#include "flywheel/rewards/remote/remote_reward.h"
#include "flywheel/rollout/judge/llm_judge.h"
#include "flywheel/rollout/logits_processor.h"
#include "flywheel/rollout/remote_environment.h"

namespace flywheel::jobs {

std::string JobSetup::config_dir() const {
  return loaded.files.empty()
             ? std::filesystem::current_path().string()
             : std::filesystem::absolute(loaded.files.front()).parent_path().string();
}

absl::StatusOr<JobSetup> set_up_job(const std::string& config_path,
                                    const std::vector<std::string>& overrides, bool load_plugins) {
  JobSetup job;
  core::ConfigLoadOptions options;
  options.overrides = overrides;
  FLYWHEEL_ASSIGN_OR_RETURN(job.loaded, core::load_config_file(config_path, options));
  FLYWHEEL_RETURN_IF_ERROR(algos::apply_algorithm_preset(&job.loaded));
  job.registry = std::make_unique<core::PluginRegistry>();
  FLYWHEEL_RETURN_IF_ERROR(core::register_core_builtins(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(rollout::register_rollout_builtins(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(rollout::register_remote_environment(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(algos::register_algos_builtins(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(rewards::register_rewards_builtins(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(rewards::register_reward_model(*job.registry));
  FLYWHEEL_RETURN_IF_ERROR(rewards::register_process_reward_model(*job.registry));
  // llm_judge runs the judge here, or with params.address asks `flywheel reward-serve`'s.
  auto llm_judge = [](const rewards::RewardSpec& spec)
      -> absl::StatusOr<std::unique_ptr<rewards::RewardFunction>> {
    if (spec.params.count("address") != 0) return rewards::make_remote_reward(spec);
    return rollout::make_llm_judge(spec);
  };
  auto& reward_registry = job.registry->get<rewards::RewardFunction, const rewards::RewardSpec&>();
  FLYWHEEL_RETURN_IF_ERROR(reward_registry.add("llm_judge", llm_judge));
  if (load_plugins) {
    absl::Status status = job.registry->load_plugins(job.loaded.config.plugins);
    if (!status.ok()) {
      std::string where =
          job.loaded.origins.count("plugins") ? job.loaded.origins.at("plugins") : config_path;
      return absl::Status(status.code(), absl::StrCat(where, ": plugins: ", status.message()));
    }
    FLYWHEEL_RETURN_IF_ERROR(core::check_registered_names(job.loaded, *job.registry));
  }
  return job;
}

absl::StatusOr<TrainingWorld> join_training_world(const core::Config& config,
                                                  const std::string& log_name) {
  TrainingWorld out;
  FLYWHEEL_ASSIGN_OR_RETURN(out.mpi, comm::MpiRuntime::init(nullptr, nullptr));
  FLYWHEEL_ASSIGN_OR_RETURN(out.world, comm::MpiCommunicator::world(
                                           *out.mpi, comm::collective_options("learners", config)));
  core::set_log_prefix(log_name, out.world->rank());
  at::set_num_threads(static_cast<int>(config.cluster.threads_per_process));
  model::keep_freed_cpu_memory_for_reuse(model::FreedMemoryReuse::kLearner);
  return out;
}

}  // namespace flywheel::jobs
