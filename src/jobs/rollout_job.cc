#include "flywheel/jobs/rollout_job.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/algos/algorithm.h"
#include "flywheel/comm/mpmd.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/jobs/agent_setup.h"
#include "flywheel/jobs/controller_host.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/cpu/thread_layout.h"
#include "flywheel/model/device_choice.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rollout/engine_config.h"
#include "flywheel/rollout/turn_markers.h"
#include "flywheel/rollout/worker/prompt_encoder.h"
#include "flywheel/rollout/worker/rollout_worker.h"

namespace flywheel::jobs {
namespace {

namespace fs = std::filesystem;

// The dtype this worker runs: the published weights' (`published`, from the controller) when
// model.dtype is auto; an explicit model.dtype must be the same (FailedPrecondition), since
// weights converted on arrival would make every checksum acknowledgement meaningless.
absl::StatusOr<at::ScalarType> weights_dtype(const core::Config& c, const std::string& published) {
  if (published.empty()) {
    return model::resolve_dtype(c.model.dtype, model::uses_cuda(c.model.device));
  }
  absl::StatusOr<at::ScalarType> theirs = model::parse_dtype(published);
  if (!theirs.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the controller publishes weights of an unknown dtype '", published, "'"));
  }
  if (c.model.dtype != core::Dtype::kAuto) {
    const at::ScalarType mine = model::resolve_dtype(c.model.dtype, /*on_cuda=*/false);
    if (mine != *theirs) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model.dtype is ", core::choice_name(c.model.dtype), " here but the learners publish ",
          published, " weights; use the same model.dtype (or auto) on every host"));
    }
  }
  return *theirs;
}

// Appends this process's stdout and stderr to `path` ("{rank}" replaced by `rank`).
absl::Status redirect_output(std::string path, int rank) {
  const size_t at = path.find("{rank}");
  if (at != std::string::npos) path.replace(at, 6, std::to_string(rank));
  std::error_code ec;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("--log-file: cannot open ", path, ": ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  return absl::OkStatus();
}

// Applies cluster.threads_per_process and cluster.thread_split to this process for a model
// computing in `dtype`; returns the layout to log. Called once, at start.
model::ThreadLayout apply_thread_layout(const core::ClusterOptions& cluster, at::ScalarType dtype) {
  model::ThreadLayoutOptions options;
  options.threads = static_cast<int>(cluster.threads_per_process);
  options.dtype = dtype;
  options.split = cluster.thread_split;
  return model::apply_thread_layout(options);
}

}  // namespace

absl::Status run_rollout_worker(const JobSetup& job, const RolloutJobOptions& args,
                                const std::function<bool()>& stop, bool* serving) {
  const core::Config& c = job.loaded.config;

  std::string address = args.controller;
  std::string worker_id = args.worker_id;
  std::unique_ptr<comm::MpiRuntime> mpi;
  std::optional<comm::MpmdWorld> roles;
  comm::WeightGroup weight_group;
  if (comm::launched_by_mpi()) {
    // Part of an MPMD job: join it (the learners wait for every rank) and hear the address.
    auto runtime = comm::MpiRuntime::init(nullptr, nullptr);
    if (!runtime.ok()) return runtime.status();
    mpi = std::move(*runtime);
    auto joined = comm::join_mpmd_world(*mpi, comm::Role::kRollout, c);
    if (!joined.ok()) return joined.status();
    roles = std::move(*joined);
    const std::string announced = comm::broadcast_string(*roles->world, "");
    if (address.empty()) address = announced;
    if (worker_id.empty()) worker_id = absl::StrCat("rollout-", roles->role->rank());
    if (core::weight_transport(c.weight_sync) != core::WeightTransport::kGrpc) {
      auto joined = comm::join_weight_group(
          *roles, comm::Role::kRollout, c,
          model::uses_cuda(c.model.device) ? comm::local_cuda_device(roles->world->rank()) : -1);
      if (!joined.ok()) return joined.status();
      weight_group = std::move(*joined);
    }
  } else if (core::weight_transport(c.weight_sync) != core::WeightTransport::kGrpc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight_sync.transport ", core::choice_name(core::weight_transport(c.weight_sync)),
        " needs this worker to be a rank of the learners' MPMD mpirun (mpirun ... flywheel "
        "learner c.yaml : ... flywheel rollout c.yaml); a worker started on its own uses grpc"));
  }
  if (!args.log_file.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(redirect_output(args.log_file, roles ? roles->role->rank() : 0));
  }
  if (address.empty()) address = c.cluster.controller_address;
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "--controller HOST:PORT (or cluster.controller_address) is required outside an MPMD "
        "mpirun");
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  if (worker_id.empty()) worker_id = absl::StrCat(host, "-", getpid());
  core::set_log_prefix(worker_id, roles ? roles->role->rank() : 0);

  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string()));
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c.tokenizer, c.model.path));
  // The controller first: the learners decide the weights' dtype (model.dtype auto resolves by
  // their host's CPU or GPU), and this worker runs what they publish.
  FLYWHEEL_ASSIGN_OR_RETURN(buffer::ControllerClientOptions client_options,
                            controller_client_options(c, address, worker_id));
  auto client = buffer::ControllerClient::connect(client_options);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::RegisterReply> registered = (*client)->register_worker();
  if (!registered.ok()) {
    return absl::Status(registered.status().code(),
                        absl::StrCat("cannot register with the controller at ", address, ": ",
                                     registered.status().message()));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype, weights_dtype(c, registered->weights_dtype()));
  const model::ThreadLayout layout = apply_thread_layout(c.cluster, dtype);
  model::keep_freed_cpu_memory_for_reuse();
  FLYWHEEL_LOG_INFO("cpu: %s; %s", model::describe(model::detect_cpu_features()),
                    layout.to_string());
  model::DecoderOptions decoder_options;
  decoder_options.dtype = dtype;
  decoder_options.threads = layout.threads;
  // Under mpirun, one GPU per process of the node (learners and workers alike) where there are
  // enough.
  const int cuda_device = std::max(0, comm::local_cuda_device(roles ? roles->world->rank() : 0));
  decoder_options.device = model::resolve_device(c.model.device, cuda_device);
  decoder_options.lora = model::LoraOptions::from_config(c.trainer.lora);
  // The weights come from the controller (the learners' current version), not from model.path;
  // with LoRA only the adapters do, and the frozen base is read from model.path here.
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::DecoderModel> model,
                            model::DecoderModel::create(model_config, decoder_options));
  if (decoder_options.lora.enabled()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> base = model::open_hf_weights(c.model.path);
    absl::Status loaded = base.ok() ? model->load(*base) : base.status();
    if (!loaded.ok()) {
      return absl::Status(loaded.code(),
                          absl::StrCat("trainer.lora: the rollout worker reads the frozen base "
                                       "weights from model.path: ",
                                       loaded.message()));
    }
  }
  rollout::EngineContext context;
  context.tokenizer = tokenizers.tokenizer.get();
  context.registry = job.registry.get();
  context.initial_version = -1;  // nothing generated before the first weights arrive
  auto engine = rollout::GenerationEngine::create(std::move(model),
                                                  rollout::engine_options_from_config(c), context);
  if (!engine.ok()) return engine.status();

  auto composite = rewards::CompositeReward::create(c.rewards, *job.registry,
                                                    c.rollout.max_new_tokens, job.config_dir());
  if (!composite.ok()) return composite.status();
  auto pool =
      rewards::ScoringPool::create(*composite, rewards::ScoringPoolOptions::from_config(c.rewards));
  if (!pool.ok()) return pool.status();

  FLYWHEEL_ASSIGN_OR_RETURN(bool greedy_baseline, algos::needs_greedy_baseline(c, *job.registry));
  FLYWHEEL_ASSIGN_OR_RETURN(
      std::shared_ptr<const rollout::Environment> environment,
      rollout::make_environment(c.environment, *job.registry, job.config_dir()));
  if (environment && greedy_baseline) {
    return absl::InvalidArgumentError(
        "environment.name: an estimator with a greedy baseline (remax) is not implemented for "
        "multi-turn episodes");
  }

  rollout::PromptEncoder encoder(tokenizers, c.data, model_config.vocab_size);
  rollout::RolloutWorkerOptions options;
  options.worker_id = worker_id;
  options.group_size = c.rollout.group_size;
  options.max_slots = c.rollout.max_slots;
  options.sampling = rollout::sampling_params_from_config(c);
  options.sampling.stop_token_ids = model_config.eos_token_ids;
  options.weight_timeout_s = c.weight_sync.timeout_s;
  options.drain_timeout_s = c.rewards.timeout_s + 5;
  options.finish_on_stop_s = c.rollout.finish_on_stop_s;
  options.greedy_baseline = greedy_baseline;
  rollout::TurnMarkerIds markers;
  if (!c.environment.name.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(markers, rollout::turn_marker_ids(tokenizers));
  }
  options.episodes = rollout::EpisodeOptions::from_config(c.environment, std::move(markers));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<rollout::AgentRunner> agents,
                            make_agent_runner(c, job.config_dir(), engine->get(), tokenizers,
                                              client_options.token, &options));
  FLYWHEEL_LOG_INFO(
      "rollout worker %s on %s: controller %s, %d slots, groups of %d, %d thread(s), weights "
      "over %s",
      worker_id, host, address, c.rollout.max_slots, c.rollout.group_size,
      c.cluster.threads_per_process, core::choice_name(core::weight_transport(c.weight_sync)));
  const auto start = std::chrono::steady_clock::now();
  std::optional<rollout::ChannelWeightSource> channel_source;
  std::optional<rollout::GrpcWeightSource> grpc_source;
  rollout::WeightSource* weights = nullptr;
  if (weight_group.channel) {
    weights = &channel_source.emplace(weight_group.channel.get(), client->get());
    options.poll_interval_s = 0.002;  // a probe for a message: no RPC
  } else {
    weights = &grpc_source.emplace(client->get());
  }
  rollout::RolloutWorkerParts parts;
  parts.client = client->get();
  parts.weights = weights;
  parts.engine = engine->get();
  parts.encoder = &encoder;
  parts.tokenizer = tokenizers.tokenizer.get();
  parts.pool = pool->get();
  parts.environment = environment;
  parts.agents = agents.get();
  auto worker = std::make_unique<rollout::RolloutWorker>(options, parts);
  *serving = true;
  absl::Status s = worker->run(stop);
  pool->reset();  // every scoring callback (they use the worker) has run
  const rollout::RolloutWorkerStats stats = worker->stats();
  worker.reset();  // its fetcher thread is done with the weight source
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (channel_source) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: %d versions received over %s, %d damaged (fetched over gRPC)\n",
        worker_id, channel_source->received(),
        core::choice_name(core::weight_transport(c.weight_sync)), channel_source->damaged());
  }
  const buffer::ControllerClient::WeightFetchCounters fetches = (*client)->weight_fetch_counters();
  if (fetches.full + fetches.deltas > 0) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: weights over gRPC: %d versions whole (%.4f s each), %d as deltas "
        "(%.4f s each; %d deltas failed and were fetched whole), %.3f MiB received\n",
        worker_id, fetches.full, fetches.full_s / std::max<int64_t>(fetches.full, 1),
        fetches.deltas, fetches.delta_s / std::max<int64_t>(fetches.deltas, 1),
        fetches.delta_failures, fetches.bytes / 1048576.0);
  }
  std::cerr << absl::StrFormat(
      "flywheel rollout %s: %d groups pushed (%d accepted, %d rejected), %d leases released, "
      "%d tokens in %.1f s (%.0f tokens/s), %d weight updates (%.1f ms staging each)\n",
      worker_id, stats.groups_pushed, stats.groups_accepted, stats.groups_rejected,
      stats.leases_released, stats.generated_tokens, elapsed,
      stats.generated_tokens / std::max(elapsed, 1e-9), stats.weight_updates,
      stats.weight_updates ? 1e3 * stats.weight_stage_s / stats.weight_updates : 0.0);
  if (stats.groups_handed_over + stats.groups_resumed > 0) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: %d groups handed back at the stop with their samples so far (%d "
        "tokens), %d groups continued from another worker's samples (%d tokens not generated "
        "again)\n",
        worker_id, stats.groups_handed_over, stats.handed_over_tokens, stats.groups_resumed,
        stats.resumed_tokens);
  }
  return s;
}

}  // namespace flywheel::jobs
