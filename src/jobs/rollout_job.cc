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

// One rollout worker, assembled step by step by run(): its place in the job, the controller's
// client, the engine for the weights' dtype, the rewards, the worker's options, then
// rollout::RolloutWorker's loop. Members are declared in the order they are built, so that each
// is destroyed before what it points into.
class RolloutWorkerJob {
 public:
  RolloutWorkerJob(const JobSetup& job, const RolloutJobOptions& args)
      : job_(job), c_(job.loaded.config), args_(args) {}

  absl::Status run(const std::function<bool()>& stop, bool* serving);

 private:
  // Under mpirun, the MPMD job (and its weight group); then --log-file, the controller's
  // address, this worker's id and its log prefix.
  absl::Status join();
  // The model's config and tokenizer; registered with the controller, whose weights decide the
  // dtype (model.dtype auto resolves by the learners' host).
  absl::Status connect();
  // The thread layout, the model (with LoRA, its frozen base from model.path) and the engine.
  absl::Status build_engine();
  // The reward functions' scoring pool and the environment.
  absl::Status build_scoring();
  // The worker's options, and the agents' driver when rollout.agent is set.
  absl::Status build_options();
  // The weight channel of the MPMD job (build_options polls it often), else the controller over
  // gRPC.
  rollout::WeightSource* weight_source();
  // The worker's counters, its weight fetches and hand-overs to stderr.
  void print_summary(const rollout::RolloutWorkerStats& stats, double elapsed_s) const;

  int rank() const { return roles_ ? roles_->role->rank() : 0; }

  const JobSetup& job_;
  const core::Config& c_;
  const RolloutJobOptions& args_;

  std::string address_, worker_id_, hostname_;
  std::unique_ptr<comm::MpiRuntime> mpi_;
  std::optional<comm::MpmdWorld> roles_;
  comm::WeightGroup weight_group_;

  model::ModelConfig model_config_;
  model::TokenizerSetup tokenizers_;
  buffer::ControllerClientOptions client_options_;
  std::unique_ptr<buffer::ControllerClient> client_;
  at::ScalarType dtype_ = at::kFloat;
  std::unique_ptr<rollout::GenerationEngine> engine_;

  std::unique_ptr<rewards::ScoringPool> pool_;
  bool greedy_baseline_ = false;
  std::shared_ptr<const rollout::Environment> environment_;

  std::unique_ptr<rollout::PromptEncoder> encoder_;
  rollout::RolloutWorkerOptions options_;
  std::unique_ptr<rollout::AgentRunner> agents_;

  std::optional<rollout::ChannelWeightSource> channel_source_;
  std::optional<rollout::GrpcWeightSource> grpc_source_;
};

absl::Status RolloutWorkerJob::run(const std::function<bool()>& stop, bool* serving) {
  FLYWHEEL_RETURN_IF_ERROR(join());
  FLYWHEEL_RETURN_IF_ERROR(connect());
  FLYWHEEL_RETURN_IF_ERROR(build_engine());
  FLYWHEEL_RETURN_IF_ERROR(build_scoring());
  FLYWHEEL_RETURN_IF_ERROR(build_options());
  FLYWHEEL_LOG_INFO(
      "rollout worker %s on %s: controller %s, %d slots, groups of %d, %d thread(s), weights "
      "over %s",
      worker_id_, hostname_, address_, c_.rollout.max_slots, c_.rollout.group_size,
      c_.cluster.threads_per_process, core::choice_name(core::weight_transport(c_.weight_sync)));
  const auto start = std::chrono::steady_clock::now();
  rollout::RolloutWorkerParts parts;
  parts.client = client_.get();
  parts.weights = weight_source();
  parts.engine = engine_.get();
  parts.encoder = encoder_.get();
  parts.tokenizer = tokenizers_.tokenizer.get();
  parts.pool = pool_.get();
  parts.environment = environment_;
  parts.agents = agents_.get();
  auto worker = std::make_unique<rollout::RolloutWorker>(options_, parts);
  *serving = true;
  absl::Status s = worker->run(stop);
  pool_.reset();  // every scoring callback (they use the worker) has run
  const rollout::RolloutWorkerStats stats = worker->stats();
  worker.reset();  // its fetcher thread is done with the weight source
  print_summary(stats,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return s;
}

absl::Status RolloutWorkerJob::join() {
  address_ = args_.controller;
  worker_id_ = args_.worker_id;
  if (comm::launched_by_mpi()) {
    // Part of an MPMD job: join it (the learners wait for every rank) and hear the address.
    FLYWHEEL_ASSIGN_OR_RETURN(mpi_, comm::MpiRuntime::init(nullptr, nullptr));
    FLYWHEEL_ASSIGN_OR_RETURN(roles_, comm::join_mpmd_world(*mpi_, comm::Role::kRollout, c_));
    const std::string announced = comm::broadcast_string(*roles_->world, "");
    if (address_.empty()) address_ = announced;
    if (worker_id_.empty()) worker_id_ = absl::StrCat("rollout-", roles_->role->rank());
    if (core::weight_transport(c_.weight_sync) != core::WeightTransport::kGrpc) {
      FLYWHEEL_ASSIGN_OR_RETURN(
          weight_group_,
          comm::join_weight_group(*roles_, comm::Role::kRollout, c_,
                                  model::uses_cuda(c_.model.device)
                                      ? comm::local_cuda_device(roles_->world->rank())
                                      : -1));
    }
  } else if (core::weight_transport(c_.weight_sync) != core::WeightTransport::kGrpc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight_sync.transport ", core::choice_name(core::weight_transport(c_.weight_sync)),
        " needs this worker to be a rank of the learners' MPMD mpirun (mpirun ... flywheel "
        "learner c.yaml : ... flywheel rollout c.yaml); a worker started on its own uses grpc"));
  }
  if (!args_.log_file.empty()) FLYWHEEL_RETURN_IF_ERROR(redirect_output(args_.log_file, rank()));
  if (address_.empty()) address_ = c_.cluster.controller_address;
  if (address_.empty()) {
    return absl::InvalidArgumentError(
        "--controller HOST:PORT (or cluster.controller_address) is required outside an MPMD "
        "mpirun");
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
  if (worker_id_.empty()) worker_id_ = absl::StrCat(hostname_, "-", getpid());
  core::set_log_prefix(worker_id_, rank());
  return absl::OkStatus();
}

absl::Status RolloutWorkerJob::connect() {
  if (c_.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  FLYWHEEL_ASSIGN_OR_RETURN(model_config_, model::ModelConfig::from_file(
                                               (fs::path(c_.model.path) / "config.json").string()));
  FLYWHEEL_ASSIGN_OR_RETURN(tokenizers_, model::load_tokenizer_setup(c_.tokenizer, c_.model.path));
  // The controller first: the learners decide the weights' dtype (model.dtype auto resolves by
  // their host's CPU or GPU), and this worker runs what they publish.
  FLYWHEEL_ASSIGN_OR_RETURN(client_options_, controller_client_options(c_, address_, worker_id_));
  FLYWHEEL_ASSIGN_OR_RETURN(client_, buffer::ControllerClient::connect(client_options_));
  absl::StatusOr<v1::RegisterReply> registered = client_->register_worker();
  if (!registered.ok()) {
    return absl::Status(registered.status().code(),
                        absl::StrCat("cannot register with the controller at ", address_, ": ",
                                     registered.status().message()));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(dtype_, weights_dtype(c_, registered->weights_dtype()));
  return absl::OkStatus();
}

absl::Status RolloutWorkerJob::build_engine() {
  const model::ThreadLayout layout = apply_thread_layout(c_.cluster, dtype_);
  model::keep_freed_cpu_memory_for_reuse();
  FLYWHEEL_LOG_INFO("cpu: %s; %s", model::describe(model::detect_cpu_features()),
                    layout.to_string());
  model::DecoderOptions decoder_options;
  decoder_options.dtype = dtype_;
  decoder_options.threads = layout.threads;
  // Under mpirun, one GPU per process of the node (learners and workers alike) where there are
  // enough.
  const int cuda_device = std::max(0, comm::local_cuda_device(roles_ ? roles_->world->rank() : 0));
  decoder_options.device = model::resolve_device(c_.model.device, cuda_device);
  decoder_options.lora = model::LoraOptions::from_config(c_.trainer.lora);
  // The weights come from the controller (the learners' current version), not from model.path;
  // with LoRA only the adapters do, and the frozen base is read from model.path here.
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::DecoderModel> model,
                            model::DecoderModel::create(model_config_, decoder_options));
  if (decoder_options.lora.enabled()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> base = model::open_hf_weights(c_.model.path);
    absl::Status loaded = base.ok() ? model->load(*base) : base.status();
    if (!loaded.ok()) {
      return absl::Status(loaded.code(),
                          absl::StrCat("trainer.lora: the rollout worker reads the frozen base "
                                       "weights from model.path: ",
                                       loaded.message()));
    }
  }
  rollout::EngineContext context;
  context.tokenizer = tokenizers_.tokenizer.get();
  context.registry = job_.registry.get();
  context.initial_version = -1;  // nothing generated before the first weights arrive
  FLYWHEEL_ASSIGN_OR_RETURN(
      engine_, rollout::GenerationEngine::create(std::move(model),
                                                 rollout::engine_options_from_config(c_), context));
  return absl::OkStatus();
}

absl::Status RolloutWorkerJob::build_scoring() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      std::shared_ptr<const rewards::CompositeReward> composite,
      rewards::CompositeReward::create(c_.rewards, *job_.registry, c_.rollout.max_new_tokens,
                                       job_.config_dir()));
  FLYWHEEL_ASSIGN_OR_RETURN(
      pool_, rewards::ScoringPool::create(composite,
                                          rewards::ScoringPoolOptions::from_config(c_.rewards)));
  FLYWHEEL_ASSIGN_OR_RETURN(greedy_baseline_, algos::needs_greedy_baseline(c_, *job_.registry));
  FLYWHEEL_ASSIGN_OR_RETURN(
      environment_, rollout::make_environment(c_.environment, *job_.registry, job_.config_dir()));
  if (environment_ && greedy_baseline_) {
    return absl::InvalidArgumentError(
        "environment.name: an estimator with a greedy baseline (remax) is not implemented for "
        "multi-turn episodes");
  }
  return absl::OkStatus();
}

absl::Status RolloutWorkerJob::build_options() {
  encoder_ =
      std::make_unique<rollout::PromptEncoder>(tokenizers_, c_.data, model_config_.vocab_size);
  options_.worker_id = worker_id_;
  options_.group_size = c_.rollout.group_size;
  options_.max_slots = c_.rollout.max_slots;
  options_.sampling = rollout::sampling_params_from_config(c_);
  options_.sampling.stop_token_ids = model_config_.eos_token_ids;
  options_.weight_timeout_s = c_.weight_sync.timeout_s;
  options_.drain_timeout_s = c_.rewards.timeout_s + 5;
  options_.finish_on_stop_s = c_.rollout.finish_on_stop_s;
  options_.greedy_baseline = greedy_baseline_;
  if (weight_group_.channel) options_.poll_interval_s = 0.002;  // a probe for a message: no RPC
  rollout::TurnMarkerIds markers;
  if (!c_.environment.name.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(markers, rollout::turn_marker_ids(tokenizers_));
  }
  options_.episodes = rollout::EpisodeOptions::from_config(c_.environment, std::move(markers));
  FLYWHEEL_ASSIGN_OR_RETURN(agents_,
                            make_agent_runner(c_, job_.config_dir(), engine_.get(), tokenizers_,
                                              client_options_.token, &options_));
  return absl::OkStatus();
}

rollout::WeightSource* RolloutWorkerJob::weight_source() {
  if (weight_group_.channel) {
    return &channel_source_.emplace(weight_group_.channel.get(), client_.get());
  }
  return &grpc_source_.emplace(client_.get());
}

void RolloutWorkerJob::print_summary(const rollout::RolloutWorkerStats& stats,
                                     double elapsed_s) const {
  if (channel_source_) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: %d versions received over %s, %d damaged (fetched over gRPC)\n",
        worker_id_, channel_source_->received(),
        core::choice_name(core::weight_transport(c_.weight_sync)), channel_source_->damaged());
  }
  const buffer::ControllerClient::WeightFetchCounters fetches = client_->weight_fetch_counters();
  if (fetches.full + fetches.deltas > 0) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: weights over gRPC: %d versions whole (%.4f s each), %d as deltas "
        "(%.4f s each; %d deltas failed and were fetched whole), %.3f MiB received\n",
        worker_id_, fetches.full, fetches.full_s / std::max<int64_t>(fetches.full, 1),
        fetches.deltas, fetches.delta_s / std::max<int64_t>(fetches.deltas, 1),
        fetches.delta_failures, fetches.bytes / 1048576.0);
  }
  std::cerr << absl::StrFormat(
      "flywheel rollout %s: %d groups pushed (%d accepted, %d rejected), %d leases released, "
      "%d tokens in %.1f s (%.0f tokens/s), %d weight updates (%.1f ms staging each)\n",
      worker_id_, stats.groups_pushed, stats.groups_accepted, stats.groups_rejected,
      stats.leases_released, stats.generated_tokens, elapsed_s,
      stats.generated_tokens / std::max(elapsed_s, 1e-9), stats.weight_updates,
      stats.weight_updates ? 1e3 * stats.weight_stage_s / stats.weight_updates : 0.0);
  if (stats.groups_handed_over + stats.groups_resumed > 0) {
    std::cerr << absl::StrFormat(
        "flywheel rollout %s: %d groups handed back at the stop with their samples so far (%d "
        "tokens), %d groups continued from another worker's samples (%d tokens not generated "
        "again)\n",
        worker_id_, stats.groups_handed_over, stats.handed_over_tokens, stats.groups_resumed,
        stats.resumed_tokens);
  }
}

}  // namespace

absl::Status run_rollout_worker(const JobSetup& job, const RolloutJobOptions& args,
                                const std::function<bool()>& stop, bool* serving) {
  RolloutWorkerJob worker_job(job, args);
  return worker_job.run(stop, serving);
}

}  // namespace flywheel::jobs
