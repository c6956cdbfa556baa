// `flywheel reward-serve CONFIG`: serves the reward functions of CONFIG's `rewards:` over gRPC
// (proto/flywheel/v1/reward.proto) until SIGINT / SIGTERM: one judge (or reward model) for many
// rollout workers, whose `llm_judge` with `params.address` scores through it.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rewards/remote/reward_server.h"

namespace flywheel::cli {
namespace {

struct RewardServeArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string address = "127.0.0.1:0";
  std::string token_file;
};

absl::Status run(const RewardServeArgs& args) {
  core::StopSignal stop("flywheel reward-serve");
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config, args.overrides));
  const core::Config& config = job.loaded.config;
  if (config.rewards.functions.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.config, ": rewards.functions is empty: nothing to serve"));
  }
  rewards::RewardServerOptions options;
  options.address = args.address;
  if (!args.token_file.empty()) {
    absl::StatusOr<std::string> token = core::read_token_file(args.token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message()));
    }
    options.token = std::move(*token);
  }
  const std::string config_dir = std::filesystem::absolute(args.config).parent_path().string();
  FLYWHEEL_ASSIGN_OR_RETURN(
      std::shared_ptr<const rewards::CompositeReward> composite,
      rewards::CompositeReward::create(config.rewards, *job.registry, config.rollout.max_new_tokens,
                                       config_dir));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<rewards::RewardServer> server,
                            rewards::RewardServer::start(composite, options));
  std::vector<std::string> labels;
  for (const rewards::WeightedReward& part : composite->parts()) labels.push_back(part.label);
  const std::string host = args.address.substr(0, args.address.rfind(':'));
  std::cout << "flywheel reward-serve: serving " << absl::StrJoin(labels, ", ") << " on " << host
            << ":" << server->port() << (options.token.empty() ? " (no token)" : " (token)")
            << std::endl;
  while (!stop.requested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server->shutdown();
  std::cout << "flywheel reward-serve: stopped" << std::endl;
  return absl::OkStatus();
}

}  // namespace

void add_reward_serve_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RewardServeArgs>();
  CLI::App* command = app.add_subcommand(
      "reward-serve",
      "Serve the config's reward functions (rewards:) over gRPC until SIGINT / SIGTERM: one "
      "judge for many rollout workers (llm_judge with params.address)");
  command->add_option("config", args->config, "YAML config with a rewards: section")->required();
  command->add_option("--set", args->overrides, "Override a config key: --set key=value")
      ->allow_extra_args(false);
  command
      ->add_option("--address", args->address,
                   "host:port to listen on (port 0 = any free port, printed at start)")
      ->capture_default_str();
  command->add_option("--token-file", args->token_file,
                      "A file whose first line is the token every call must carry "
                      "(authorization: Bearer <token>); without it, calls are not checked");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel reward-serve: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
