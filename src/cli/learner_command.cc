// `flywheel learner CONFIG`: the RL learner job (run it under mpirun; `flywheel train` does).
// Learner rank 0 hosts the controller (prompt leases, trajectory buffer, weight publication) on
// buffer.server.bind_address and writes the address to <run_dir>/controller_address; every
// rank trains on the batches rank 0 takes from the buffer; the policy version is the optimizer
// step count. Under an MPMD mpirun the rollout ranks get the controller's address over MPI.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "batch_broadcast.h"
#include "commands.h"
#include "controller_setup.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/comm/nccl_communicator.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu_features.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/learner.h"
#include "held_out_eval.h"
#include "job_setup.h"
#include "learner_job.h"
#include "mpmd.h"
#include "prompt_encoder.h"
#include "sft_data.h"
#include "stop_signal.h"
#include "weight_payload.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kControllerFile[] = "controller.json";
constexpr char kLearnerStateFile[] = "learner_state.json";  // counters that outlive a resume
constexpr char kTrainedPromptsFile[] = "trained_prompts.jsonl";
// Rank 0 tells the other ranks it still waits for a batch this often (see the step loop).
constexpr double kWaitBroadcastS = 5;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct LearnerArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

// What rank 0 owns besides its learner shard: the controller and the published weights.
struct ControllerHost {
  ControllerSetup setup;
  std::unique_ptr<buffer::ControllerCore> core;
  buffer::WeightStore weights;
  std::unique_ptr<buffer::ControllerServer> server;
  std::string address;
};

// The address workers should dial: a wildcard bind address is replaced by this host's name.
std::string dial_address(const std::string& bind_address, int port) {
  std::string host = bind_address.substr(0, bind_address.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "127.0.0.1";
  }
  return absl::StrCat(host, ":", port);
}

// Statistics of one batch of groups as the learner receives it, at policy version `version`.
struct BatchStats {
  double length_max = 0, clip_ratio = 0;
  double staleness_mean = 0, staleness_max = 0;
  int64_t violations = 0, tokens = 0;
  std::map<std::string, double> reward_parts;  // mean of each breakdown entry
};

BatchStats batch_stats(const std::vector<buffer::TrajectoryGroup>& groups, int64_t version,
                       int64_t max_staleness) {
  BatchStats s;
  double n = 0;
  std::map<std::string, double> part_counts;
  for (const buffer::TrajectoryGroup& g : groups) {
    for (const buffer::Trajectory& t : g.trajectories) {
      ++n;
      const double length = static_cast<double>(t.response_ids.size());
      s.length_max = std::max(s.length_max, length);
      s.clip_ratio += t.finish_reason == "length" ? 1 : 0;
      s.tokens += static_cast<int64_t>(t.prompt_ids.size() + t.response_ids.size());
      const int64_t oldest = t.min_version();
      const double staleness =
          oldest == std::numeric_limits<int64_t>::max() ? 0.0 : double(version - oldest);
      s.staleness_mean += staleness;
      s.staleness_max = std::max(s.staleness_max, staleness);
      if (staleness > static_cast<double>(max_staleness)) ++s.violations;
      for (const auto& [name, value] : t.reward_breakdown) {
        s.reward_parts[name] += value;
        part_counts[name] += 1;
      }
    }
  }
  if (n > 0) {
    s.clip_ratio /= n;
    s.staleness_mean /= n;
  }
  for (auto& [name, value] : s.reward_parts) value /= part_counts[name];
  return s;
}

// Keeps the lines of the trained-prompts log whose step is at most `step` (a resumed run
// repeats the steps after its checkpoint).
absl::Status truncate_trained_prompts(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::OkStatus();
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    absl::StatusOr<core::Json> json = core::Json::parse(line);
    if (!json.ok()) break;  // a torn last line from a kill
    const core::Json* s = json->find("step");
    if (s != nullptr && s->is_integer() && s->as_int() <= step) kept += line + "\n";
  }
  return core::write_file_atomically(path, kept);
}

absl::Status train(const JobSetup* job, comm::MpiRuntime& mpi, const StopSignal& stop);

absl::Status run(const LearnerArgs& args) {
  StopSignal stop("flywheel learner");
  absl::StatusOr<JobSetup> job = set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::unique_ptr<comm::MpiRuntime>> mpi = comm::MpiRuntime::init(nullptr, nullptr);
  if (!mpi.ok()) return mpi.status();
  absl::Status s = train(&*job, **mpi, stop);
  if (!s.ok() && (*mpi)->world_size() > 1) {
    // An error of one rank (often rank 0's, which hosts the controller) ends the whole job now
    // rather than leaving the others in a collective until its timeout.
    std::cerr << "flywheel learner: " << s.message() << std::endl;
    (*mpi)->abort(s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure);
  }
  return s;
}

absl::Status train(const JobSetup* job, comm::MpiRuntime& mpi, const StopSignal& stop) {
  const core::Config& c = job->loaded.config;
  absl::StatusOr<MpmdWorld> roles = join_mpmd_world(mpi, Role::kLearner, c);
  if (!roles.ok()) return roles.status();
  // GPU learners (cluster.backend nccl, or auto with model.device cuda) train over NCCL,
  // bootstrapped over MPI; one GPU per rank by local rank.
  std::unique_ptr<comm::Communicator> nccl;
  const bool use_nccl =
      c.cluster.backend == "nccl" || (c.cluster.backend == "auto" && c.model.device == "cuda");
  if (use_nccl) {
    const int device = local_cuda_device(roles->role->rank());
    if (device < 0) return absl::FailedPreconditionError("cluster.backend nccl needs a CUDA GPU");
    auto created = comm::NcclCommunicator::create(
        *roles->role, device, {"learners (nccl)", c.cluster.collective_timeout_s});
    if (!created.ok()) return created.status();
    nccl = std::move(*created);
  }
  comm::Communicator& learners = nccl ? *nccl : *roles->role;
  const int rank = learners.rank(), size = learners.size();
  core::set_log_prefix("learner", rank);
  at::set_num_threads(static_cast<int>(c.cluster.threads_per_process));

  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  absl::StatusOr<model::ModelConfig> model_config =
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string());
  if (!model_config.ok()) return model_config.status();
  absl::StatusOr<TokenizerSetup> tokenizers = load_tokenizer_setup(c);
  if (!tokenizers.ok()) return tokenizers.status();
  absl::StatusOr<at::ScalarType> rollout_dtype =
      model::resolve_dtype(c.model.dtype, /*on_cuda=*/c.model.device == "cuda");
  if (!rollout_dtype.ok()) return rollout_dtype.status();

  std::vector<std::string> weight_names;
  absl::StatusOr<model::DecoderModel::TensorLookup> weights =
      model::open_hf_weights(c.model.path, &weight_names);
  if (weights.ok()) {
    FLYWHEEL_RETURN_IF_ERROR(model::check_held_layers(
        *model_config, weight_names, (fs::path(c.model.path) / "config.json").string()));
  }
  auto learner = trainer::Learner::create(c, *model_config, &learners, *job->registry);
  if (!learner.ok()) return learner.status();
  if (weights.ok()) {
    absl::Status loaded = (*learner)->policy().load(*weights);
    if (!loaded.ok()) return loaded;
  } else {
    if (rank == 0) {
      FLYWHEEL_LOG_INFO("no weights in %s (%s): starting from a random initialisation (seed %d)",
                        c.model.path, weights.status().message(), c.trainer.seed);
    }
    (*learner)->policy().init_random(static_cast<uint64_t>(c.trainer.seed));
  }
  if (trainer::ShardedDecoder* reference = (*learner)->reference()) {
    const std::string path = c.model.reference_path.empty() ? c.model.path : c.model.reference_path;
    absl::StatusOr<model::DecoderModel::TensorLookup> ref = model::open_hf_weights(path);
    if (ref.ok()) {
      absl::Status loaded = reference->load(*ref);
      if (!loaded.ok()) return loaded;
    } else {
      reference->init_random(static_cast<uint64_t>(c.trainer.seed));
    }
  }
  if (trainer::ShardedDecoder* critic = (*learner)->critic()) {
    // The critic starts from the policy's body with a zero value head unless a critic is given.
    const std::string path = c.model.critic_path.empty() ? c.model.path : c.model.critic_path;
    absl::StatusOr<model::DecoderModel::TensorLookup> body = model::open_hf_weights(path);
    const int64_t hidden = model_config->hidden_size;
    if (body.ok()) {
      model::DecoderModel::TensorLookup lookup =
          [inner = *body, hidden](const std::string& name) -> absl::StatusOr<at::Tensor> {
        absl::StatusOr<at::Tensor> t = inner(name);
        if (!t.ok() && name == "score.weight") return at::zeros({1, hidden});
        return t;
      };
      absl::Status loaded = critic->load(lookup);
      if (!loaded.ok()) return loaded;
    } else {
      critic->init_random(static_cast<uint64_t>(c.trainer.seed));
    }
  }

  // Resume: the learners' state, then (rank 0) the controller's from the same step directory.
  const std::string checkpoints = checkpoint_dir(c);
  const std::string resume_from = resume_path(c, learners);
  std::string controller_snapshot;
  int64_t violations = 0;  // trajectories trained beyond max_staleness, over the whole run
  if (!resume_from.empty()) {
    absl::Status loaded = trainer::load_checkpoint(**learner, resume_from);
    if (!loaded.ok()) return loaded;
    if (rank == 0) {
      absl::StatusOr<std::string> snapshot =
          trainer::read_checkpoint_file(resume_from, kControllerFile);
      if (!snapshot.ok()) return snapshot.status();
      controller_snapshot = std::move(*snapshot);
      // Checkpoints from before the file existed start the count again.
      absl::StatusOr<std::string> state =
          trainer::read_checkpoint_file(resume_from, kLearnerStateFile);
      if (state.ok()) {
        absl::StatusOr<core::Json> json = core::Json::parse(*state);
        const core::Json* v = json.ok() ? json->find("staleness_violations") : nullptr;
        if (v == nullptr || !v->is_integer()) {
          return absl::DataLossError(
              absl::StrCat(resume_from, "/", kLearnerStateFile, ": no staleness_violations"));
        }
        violations = v->as_int();
      }
      FLYWHEEL_LOG_INFO("resumed from %s at version %d", resume_from, (*learner)->version());
    }
  }
  const std::string prompts_log = (fs::path(c.logging.run_dir) / kTrainedPromptsFile).string();

  // Rank 0: the controller service and the first published weights.
  std::unique_ptr<ControllerHost> host;
  if (rank == 0) {
    host = std::make_unique<ControllerHost>();
    absl::StatusOr<ControllerSetup> setup =
        prepare_controller(*job, model_config->vocab_size, "flywheel learner");
    if (!setup.ok()) return setup.status();
    host->setup = std::move(*setup);
    host->setup.server.weights_dtype = model::dtype_name(*rollout_dtype);
    auto core = make_controller_core(host->setup, controller_snapshot);
    if (!core.ok()) return core.status();
    host->core = std::move(*core);
    host->core->set_version((*learner)->version());
    if (!controller_snapshot.empty()) {
      const int64_t released = host->core->release_all();
      if (released > 0)
        FLYWHEEL_LOG_INFO("re-issuing %d prompts leased before the restart", released);
    }
    auto server = buffer::ControllerServer::start(host->core.get(), host->setup.dataset.get(),
                                                  host->setup.server, nullptr, &host->weights);
    if (!server.ok()) return server.status();
    host->server = std::move(*server);
    host->address = dial_address(c.buffer.server.bind_address, host->server->port());
    absl::Status truncated = truncate_trained_prompts(prompts_log, (*learner)->version());
    if (!truncated.ok()) return truncated;
  }
  // The controller's address for the rollout ranks of an MPMD job (and the launcher's file).
  const std::string address = comm::broadcast_string(*roles->world, host ? host->address : "");
  // weight_sync.transport mpi / nccl: rank 0 also broadcasts every version to the MPMD job's
  // rollout ranks (the controller keeps serving it over gRPC, and checks the workers' acks).
  WeightGroup weight_group;
  if (weight_transport(c) != "grpc") {
    auto joined = join_weight_group(*roles, Role::kLearner, c,
                                    c.model.device == "cuda" ? local_cuda_device(rank) : -1);
    if (!joined.ok()) return joined.status();
    weight_group = std::move(*joined);
  }
  auto publish = [&]() -> absl::Status {
    absl::StatusOr<buffer::PublishedWeights> payload = gather_payload(
        (*learner)->policy(), *rollout_dtype, (*learner)->version(), c.weight_sync.bucket_bytes);
    if (!payload.ok()) return payload.status();
    if (!host) return absl::OkStatus();
    const int64_t version = payload->version;
    absl::Status s = host->weights.publish(std::move(*payload));
    if (s.ok() && weight_group.channel) weight_group.channel->send(*host->weights.latest());
    if (s.ok()) host->core->set_weights_version(version);  // grants may now need it
    return s;
  };
  absl::Status published = publish();
  if (!published.ok()) return published;
  if (host) {
    std::error_code ec;
    fs::create_directories(c.logging.run_dir, ec);
    absl::Status written = core::write_file_atomically(
        (fs::path(c.logging.run_dir) / "controller_address").string(), address + "\n");
    if (!written.ok()) return written;
    FLYWHEEL_LOG_INFO("controller listening on %s; %d prompts, %d learner rank(s)", address,
                      host->setup.dataset->size(), size);
  }

  // Held-out evaluation on the learners' full weights.
  std::optional<SftData> eval;
  std::unique_ptr<rewards::ScoringPool> eval_scorer;
  std::unique_ptr<HeldOutEvaluator> evaluator;
  if (!c.data.eval_path.empty()) {
    absl::StatusOr<SftData> loaded =
        load_eval_data(c, *tokenizers, model_config->vocab_size, c.data.eval_path);
    if (!loaded.ok()) return loaded.status();
    eval = std::move(*loaded);
    auto scorer = make_eval_scorer(*job);
    if (!scorer.ok()) return scorer.status();
    eval_scorer = std::move(*scorer);
    auto created = HeldOutEvaluator::create(
        *model_config, tokenizers->tokenizer.get(),
        eval_options_from_config(c, *model_config, eval_scorer.get()), eval->records);
    if (!created.ok()) return created.status();
    evaluator = std::move(*created);
  }

  std::unique_ptr<core::MetricsLogger> metrics;
  if (rank == 0) {
    auto created = make_metrics_logger(
        c, *job->registry, c.trainer.total_steps,
        {"critic/score/mean", "eval/accuracy", "perf/throughput", "async/staleness_max"});
    if (!created.ok()) return created.status();
    metrics = std::move(*created);
  }
  auto log = [&](const std::string& name, double value, int64_t step) {
    if (metrics) metrics->log_scalar(name, value, step);
  };
  double first_accuracy = NAN, last_accuracy = NAN;
  auto evaluate = [&](int64_t step) -> absl::Status {
    if (!evaluator) return absl::OkStatus();
    absl::StatusOr<HeldOutEvalResult> r =
        evaluator->evaluate((*learner)->policy(), eval->records, learners);
    if (!r.ok()) return r.status();
    log_eval_result(*r, [&](const std::string& name, double value) { log(name, value, step); });
    if (std::isnan(first_accuracy)) first_accuracy = r->accuracy;
    last_accuracy = r->accuracy;
    return absl::OkStatus();
  };

  trainer::CheckpointSaveOptions save_options;
  save_options.keep_last = c.checkpoint.keep_last;
  absl::StatusOr<std::map<std::string, std::string>> side_files =
      checkpoint_side_files(tokenizers->dir);
  if (!side_files.ok()) return side_files.status();
  save_options.extra_files = std::move(*side_files);
  int64_t last_saved = resume_from.empty() ? -1 : (*learner)->version();
  auto save = [&]() -> absl::Status {
    const int64_t step = (*learner)->version();
    if (step == last_saved) return absl::OkStatus();
    trainer::CheckpointSaveOptions o = save_options;
    if (host) o.extra_files[kControllerFile] = host->core->snapshot();
    o.extra_files[kLearnerStateFile] =
        absl::StrCat("{\"staleness_violations\": ", violations, "}\n");
    absl::Status saved = trainer::save_checkpoint(**learner, checkpoints, step, o);
    if (saved.ok()) last_saved = step;
    return saved;
  };

  // Rank 0: what the workers have done to the buffer so far; the no-progress deadline runs while
  // it stays the same.
  auto progress = [&] {
    const buffer::ControllerCounters k = host->core->counters();
    return k.accepted + k.duplicates + k.filtered + k.stale_dropped + k.stale_requeued +
           k.rejected_invalid + k.rejected_lease + k.rejected_full + k.dropped;
  };
  int64_t last_progress = -1;
  auto last_progress_at = Clock::now();
  // Rank 0: the next batch from the buffer, or why there is none ("stop", "exhausted",
  // "no_progress: <why>"), or "wait" after kWaitBroadcastS without one.
  auto last_note = Clock::now();
  auto next_batch = [&](int64_t version) {
    BroadcastBatch batch;
    const auto wait_start = Clock::now();
    while (true) {
      if (stop.requested()) {
        batch.tag = "stop";
        return batch;
      }
      // Leases of workers gone silent are re-issued even while no worker asks for work.
      host->core->expire(buffer::ControllerServer::monotonic_seconds());
      const bool drained = host->core->drained();  // before buffered(): no push lost between
      if (host->core->buffered() >= c.trainer.groups_per_step) {
        std::vector<buffer::PromptRef> prompts;
        auto taken = host->core->take_batch(c.trainer.groups_per_step, &prompts);
        if (taken.ok()) {
          batch.tag = "batch";
          batch.groups = std::move(*taken);
          // The last step's batch: nothing more will be trained, so nothing more is granted
          // (workers hear "done" and stop; what they still push is drained at the end).
          if (version + 1 >= c.trainer.total_steps) host->core->close();
          std::string line = absl::StrCat("{\"step\": ", version + 1, ", \"prompts\": [");
          for (size_t i = 0; i < prompts.size(); ++i) {
            absl::StrAppend(&line, i ? ", " : "", "[", prompts[i].epoch, ", ", prompts[i].prompt,
                            "]");
          }
          std::ofstream(prompts_log, std::ios::app) << line << "]}\n" << std::flush;
          return batch;
        }
      }
      if (drained) {
        batch.tag = "exhausted";
        return batch;
      }
      const int64_t now_progress = progress();
      if (now_progress != last_progress) {
        last_progress = now_progress;
        last_progress_at = Clock::now();
      } else if (c.trainer.no_progress_timeout_s > 0 &&
                 seconds_since(last_progress_at) > c.trainer.no_progress_timeout_s) {
        batch.tag = absl::StrFormat(
            "no_progress: no group arrived for %.0f s (trainer.no_progress_timeout_s): %d of %d "
            "groups buffered, %d prompts leased; are the rollout workers running? (their logs "
            "are in %s/logs under flywheel train)",
            seconds_since(last_progress_at), host->core->buffered(), c.trainer.groups_per_step,
            host->core->in_flight(), c.logging.run_dir);
        return batch;
      }
      if (seconds_since(last_note) > 30) {
        FLYWHEEL_LOG_INFO(
            "waiting for rollout workers: %d of %d groups buffered, %d prompts leased",
            host->core->buffered(), c.trainer.groups_per_step, host->core->in_flight());
        last_note = Clock::now();
      }
      if (seconds_since(wait_start) > kWaitBroadcastS) {
        batch.tag = "wait";
        return batch;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };

  absl::Status evaluated = evaluate((*learner)->version());
  if (!evaluated.ok()) return evaluated;
  std::string stopped_by;
  const auto start = Clock::now();
  const int64_t first_step = (*learner)->version();
  while ((*learner)->version() < c.trainer.total_steps) {
    const int64_t version = (*learner)->version();
    const auto step_start = Clock::now();
    // Rank 0 waits for a batch (or a reason to stop) and hands it to every rank. While it waits
    // it sends "wait" every few seconds, so that no rank sits in one collective for longer than
    // its timeout however slow generation is.
    absl::StatusOr<BroadcastBatch> received;
    last_progress_at = Clock::now();  // the deadline counts the wait, not the last step
    do {
      BroadcastBatch batch;
      if (host) batch = next_batch(version);
      received = broadcast_batch(learners, batch);
      if (!received.ok()) return received.status();
    } while (received->tag == "wait");
    if (received->tag == "stop") {
      stopped_by = "a stop request";
      break;
    }
    if (received->tag == "exhausted") {
      stopped_by = "the end of the dataset (data.epochs)";
      break;
    }
    if (absl::StartsWith(received->tag, "no_progress: ")) {
      return absl::DeadlineExceededError(received->tag.substr(std::strlen("no_progress: ")));
    }
    const double gen_s = seconds_since(step_start);
    const BatchStats stats = batch_stats(received->groups, version, c.buffer.max_staleness);
    violations += stats.violations;

    const auto update_start = Clock::now();
    absl::StatusOr<trainer::Metrics> m = (*learner)->step(received->groups);
    if (!m.ok()) return m.status();
    const double update_s = seconds_since(update_start);
    const int64_t step = (*learner)->version();

    const auto sync_start = Clock::now();
    double sync_s = 0;
    if (step % c.weight_sync.every_steps == 0 || step == c.trainer.total_steps) {
      absl::Status s = publish();
      if (!s.ok()) return s;
      sync_s = seconds_since(sync_start);
    }
    if (host) host->core->set_version(step);  // after publishing: a grant at `step` finds them

    const double step_s = seconds_since(step_start);
    for (const auto& [name, value] : *m) log(name, value, step);
    for (const auto& [name, value] : stats.reward_parts) log("reward/" + name, value, step);
    log("response_length/max", stats.length_max, step);
    log("response_length/clip_ratio", stats.clip_ratio, step);
    log("async/staleness_mean", stats.staleness_mean, step);
    log("async/staleness_max", stats.staleness_max, step);
    log("async/staleness_violations", static_cast<double>(violations), step);
    log("timing_s/gen", gen_s, step);
    log("timing_s/update_actor", update_s, step);
    log("timing_s/weight_sync", sync_s, step);
    log("perf/time_per_step", step_s, step);
    log("perf/throughput", static_cast<double>(stats.tokens) / std::max(step_s, 1e-9), step);
    log("perf/elapsed_s", seconds_since(start), step);
    if (host) {
      for (const auto& [name, value] : host->core->counters().entries()) {
        log("buffer/" + name, static_cast<double>(value), step);
      }
      const buffer::WeightStore::AckCounters acks = host->weights.ack_counters();
      log("weight_sync/acks", static_cast<double>(acks.acks), step);
      log("weight_sync/checksum_mismatches", static_cast<double>(acks.mismatches), step);
      log("weight_sync/acks_rejected", static_cast<double>(acks.rejected), step);
    }
    if (c.eval.every_steps > 0 && step % c.eval.every_steps == 0 && step != c.trainer.total_steps) {
      absl::Status s = evaluate(step);
      if (!s.ok()) return s;
    }
    if (c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
      absl::Status s = save();
      if (!s.ok()) return s;
    }
  }
  const int64_t step = (*learner)->version();
  if (step > first_step || std::isnan(last_accuracy)) {
    absl::Status s = evaluate(step);
    if (!s.ok()) return s;
  }
  absl::Status saved = save();
  if (!saved.ok()) return saved;
  if (metrics) {
    absl::Status flushed = metrics->flush();
    if (!flushed.ok()) return flushed;
  }
  if (weight_group.channel) weight_group.channel->close();
  if (host) {
    host->core->close();  // workers hear "done" (acquiring or in a heartbeat) and stop
    // Until every live worker heard it and what they still push for prompts they hold is taken
    // (not trained on), so that no worker finds the controller gone mid-push; leases of workers
    // gone silent expire.
    const auto drain_start = Clock::now();
    while (!host->core->settled(buffer::ControllerServer::monotonic_seconds()) &&
           seconds_since(drain_start) < c.buffer.drain_timeout_s) {
      host->core->expire(buffer::ControllerServer::monotonic_seconds());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!host->core->settled(buffer::ControllerServer::monotonic_seconds())) {
      FLYWHEEL_LOG_WARN(
          "after buffer.drain_timeout_s (%.0f s): %d prompts still leased, or a "
          "worker not yet told that training is over",
          c.buffer.drain_timeout_s, host->core->in_flight());
    }
    host->server->shutdown();
  }
  std::string exported;
  if (c.checkpoint.export_hf && rank == 0) {
    exported = (fs::path(c.logging.run_dir) / "hf").string();
    absl::Status s =
        trainer::export_checkpoint((fs::path(checkpoints) / absl::StrCat("step_", step)).string(),
                                   "policy", exported, *rollout_dtype);
    if (!s.ok()) return s;
  }
  if (rank == 0) {
    // Prompts given up and groups refused as invalid are worth a look when there are any (a
    // worker of another version, a reward that fails on every record, ...).
    std::string lost;
    if (host) {
      const buffer::ControllerCounters counters = host->core->counters();
      if (counters.dropped > 0 || counters.rejected_invalid > 0) {
        lost = absl::StrFormat(
            "; %d prompts dropped and %d groups rejected as invalid (see the "
            "rollout logs)",
            counters.dropped, counters.rejected_invalid);
      }
    }
    std::cout << absl::StrFormat(
        "flywheel learner: %d steps in %.1f s%s; held-out accuracy %.3f -> %.3f; %d staleness "
        "violations%s%s\n",
        step, seconds_since(start), stopped_by.empty() ? "" : " (stopped by " + stopped_by + ")",
        first_accuracy, last_accuracy, violations, lost,
        exported.empty() ? "" : "; exported to " + exported);
  }
  return absl::OkStatus();
}

}  // namespace

void add_learner_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LearnerArgs>();
  CLI::App* command = app.add_subcommand(
      "learner",
      "The RL learner job (under mpirun): rank 0 hosts the controller; every rank trains on the "
      "batches rollout workers fill");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel learner: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
