// `flywheel rollout CONFIG --controller HOST:PORT`: one rollout worker (generation engine,
// rewards, weight updates) serving the controller until every prompt is done, the controller
// goes away, or SIGINT / SIGTERM. Under an MPMD mpirun with the learners, --controller may be
// left out: learner rank 0 sends its address.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "controller_setup.h"
#include "flywheel/algos/algorithm.h"
#include "flywheel/core/logging.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rollout/engine_config.h"
#include "job_setup.h"
#include "learner_job.h"
#include "mpmd.h"
#include "prompt_encoder.h"
#include "rollout_worker.h"
#include "stop_signal.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct RolloutArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string controller;
  std::string worker_id;
};

absl::Status run(const RolloutArgs& args) {
  StopSignal stop("flywheel rollout");
  absl::StatusOr<JobSetup> job = set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  const core::Config& c = job->loaded.config;

  std::string address = args.controller;
  std::string worker_id = args.worker_id;
  std::unique_ptr<comm::MpiRuntime> mpi;
  std::optional<MpmdWorld> roles;
  if (launched_by_mpi()) {
    // Part of an MPMD job: join it (the learners wait for every rank) and hear the address.
    auto runtime = comm::MpiRuntime::init(nullptr, nullptr);
    if (!runtime.ok()) return runtime.status();
    mpi = std::move(*runtime);
    auto joined = join_mpmd_world(*mpi, Role::kRollout, c);
    if (!joined.ok()) return joined.status();
    roles = std::move(*joined);
    const std::string announced = broadcast_string(*roles->world, "");
    if (address.empty()) address = announced;
    if (worker_id.empty()) worker_id = absl::StrCat("rollout-", roles->role->rank());
  }
  if (address.empty()) {
    return absl::InvalidArgumentError("--controller HOST:PORT is required outside an MPMD mpirun");
  }
  if (worker_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    worker_id = absl::StrCat(host, "-", getpid());
  }
  core::set_log_prefix(worker_id, roles ? roles->role->rank() : 0);
  at::set_num_threads(static_cast<int>(c.cluster.threads_per_process));

  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  absl::StatusOr<model::ModelConfig> model_config =
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string());
  if (!model_config.ok()) return model_config.status();
  absl::StatusOr<TokenizerSetup> tokenizers = load_tokenizer_setup(c);
  if (!tokenizers.ok()) return tokenizers.status();
  absl::StatusOr<at::ScalarType> dtype = model::parse_dtype(c.model.dtype);
  if (!dtype.ok()) return dtype.status();
  model::DecoderOptions decoder_options;
  decoder_options.dtype = *dtype;
  decoder_options.device = c.model.device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  // The weights come from the controller (the learners' current version), not from model.path.
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> model =
      model::DecoderModel::create(*model_config, decoder_options);
  if (!model.ok()) return model.status();
  rollout::EngineContext context;
  context.tokenizer = tokenizers->tokenizer.get();
  context.registry = job->registry.get();
  context.initial_version = -1;  // nothing generated before the first weights arrive
  auto engine = rollout::GenerationEngine::create(std::move(*model),
                                                  rollout::engine_options_from_config(c), context);
  if (!engine.ok()) return engine.status();

  const std::string config_dir =
      fs::absolute(job->loaded.files.empty() ? args.config_path : job->loaded.files.front())
          .parent_path()
          .string();
  auto composite = rewards::CompositeReward::create(c.rewards, *job->registry,
                                                    c.rollout.max_new_tokens, config_dir);
  if (!composite.ok()) return composite.status();
  auto pool =
      rewards::ScoringPool::create(*composite, rewards::ScoringPoolOptions::from_config(c.rewards));
  if (!pool.ok()) return pool.status();

  absl::StatusOr<buffer::ControllerClientOptions> client_options =
      controller_client_options(c, address, worker_id);
  if (!client_options.ok()) return client_options.status();
  auto client = buffer::ControllerClient::connect(*client_options);
  if (!client.ok()) return client.status();

  absl::StatusOr<algos::Algorithm> algorithm = algos::Algorithm::create(c, *job->registry);
  if (!algorithm.ok()) return algorithm.status();

  PromptEncoder encoder(*tokenizers, c.data, model_config->vocab_size);
  RolloutWorkerOptions options;
  options.worker_id = worker_id;
  options.group_size = c.rollout.group_size;
  options.max_slots = c.rollout.max_slots;
  options.sampling = rollout::sampling_params_from_config(c);
  options.sampling.stop_token_ids = model_config->eos_token_ids;
  options.max_staleness = c.buffer.max_staleness;
  options.weight_timeout_s = c.weight_sync.timeout_s;
  options.drain_timeout_s = c.rewards.timeout_s + 5;
  options.greedy_baseline = algorithm->estimator->needs_greedy_baseline();
  FLYWHEEL_LOG_INFO("rollout worker %s: controller %s, %d slots, groups of %d, %d thread(s)",
                    worker_id, address, c.rollout.max_slots, c.rollout.group_size,
                    c.cluster.threads_per_process);
  const auto start = std::chrono::steady_clock::now();
  RolloutWorker worker(options, client->get(), engine->get(), &encoder, tokenizers->tokenizer.get(),
                       pool->get());
  absl::Status s = worker.run(stop);
  pool->reset();  // every scoring callback (they use the worker) has run
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const RolloutWorkerStats stats = worker.stats();
  std::cerr << absl::StrFormat(
      "flywheel rollout %s: %d groups pushed (%d accepted, %d rejected), %d leases released, "
      "%d tokens in %.1f s (%.0f tokens/s), %d weight updates (%.1f ms staging each)\n",
      worker_id, stats.groups_pushed, stats.groups_accepted, stats.groups_rejected,
      stats.leases_released, stats.generated_tokens, elapsed,
      stats.generated_tokens / std::max(elapsed, 1e-9), stats.weight_updates,
      stats.weight_updates ? 1e3 * stats.weight_stage_s / stats.weight_updates : 0.0);
  return s;
}

}  // namespace

void add_rollout_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RolloutArgs>();
  CLI::App* command = app.add_subcommand(
      "rollout",
      "A rollout worker: generates and scores groups for the controller's prompts and applies "
      "the learners' weights as they are published");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option(
      "--controller", args->controller,
      "HOST:PORT of the controller (learner rank 0); optional under an MPMD mpirun");
  command->add_option("--worker-id", args->worker_id,
                      "This worker's id (default: HOST-PID, or rollout-RANK under mpirun)");
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel rollout: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
