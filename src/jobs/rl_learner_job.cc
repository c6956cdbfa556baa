#include "flywheel/jobs/rl_learner_job.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/comm/mpmd.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/eval/held_out_eval.h"
#include "flywheel/jobs/controller_host.h"
#include "flywheel/model/device_choice.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/controller_batch_source.h"
#include "flywheel/trainer/learner_job.h"
#include "flywheel/trainer/learner_weights.h"
#include "flywheel/trainer/rl_loop.h"
#include "flywheel/trainer/weight_publisher.h"

namespace flywheel::jobs {
namespace {

namespace fs = std::filesystem;

constexpr char kTrainedPromptsFile[] = "trained_prompts.jsonl";

}  // namespace

absl::Status run_rl_learner(const JobSetup& job, comm::MpiRuntime& mpi,
                            const std::function<bool()>& stop) {
  const core::Config& c = job.loaded.config;
  FLYWHEEL_ASSIGN_OR_RETURN(comm::MpmdWorld roles,
                            comm::join_mpmd_world(mpi, comm::Role::kLearner, c));
  // GPU learners train over NCCL (bootstrapped over MPI), CPU ones over MPI.
  absl::StatusOr<std::unique_ptr<comm::Communicator>> nccl = comm::learner_nccl(roles, c);
  if (!nccl.ok()) return nccl.status();
  comm::Communicator& learners = *nccl ? **nccl : *roles.role;
  const int rank = learners.rank(), size = learners.size();
  core::set_log_prefix("learner", rank);
  at::set_num_threads(static_cast<int>(c.cluster.threads_per_process));

  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  const std::string config_json = (fs::path(c.model.path) / "config.json").string();
  FLYWHEEL_ASSIGN_OR_RETURN(model::ModelConfig model_config,
                            model::ModelConfig::from_file(config_json));
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c.tokenizer, c.model.path));
  const at::ScalarType rollout_dtype =
      model::resolve_dtype(c.model.dtype, model::uses_cuda(c.model.device));

  trainer::LearnerWeightSources sources;
  std::vector<std::string> weight_names;
  sources.policy = model::open_hf_weights(c.model.path, &weight_names);
  if (sources.policy.ok()) {
    FLYWHEEL_RETURN_IF_ERROR(model::check_held_layers(model_config, weight_names, config_json));
  }
  sources.policy_path = c.model.path;
  sources.reference_path = c.model.reference_path.empty() ? c.model.path : c.model.reference_path;
  sources.critic_path = c.model.critic_path.empty() ? c.model.path : c.model.critic_path;
  sources.teacher_path = c.distill.teacher_path;
  sources.seed = static_cast<uint64_t>(c.trainer.seed);
  auto learner = trainer::Learner::create(c, model_config, &learners, *job.registry);
  if (!learner.ok()) return learner.status();
  FLYWHEEL_RETURN_IF_ERROR(trainer::load_learner_weights(**learner, sources));
  if (rank == 0) {
    FLYWHEEL_LOG_INFO("policy %s",
                      trainer::memory_summary((*learner)->policy(), (*learner)->optimizer()));
  }

  // Resume: the learners' state, then (rank 0) the controller's from the same step directory.
  const std::string checkpoints = trainer::checkpoint_dir(c);
  const std::string resume_from = trainer::resume_path(c, learners);
  trainer::ResumedState resumed;
  if (!resume_from.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(trainer::load_checkpoint(**learner, resume_from));
    if (rank == 0) {
      FLYWHEEL_ASSIGN_OR_RETURN(trainer::ResumedState state,
                                trainer::read_resumed_state(resume_from));
      resumed = std::move(state);
      FLYWHEEL_LOG_INFO("resumed from %s at version %d", resume_from, (*learner)->version());
    }
  }
  const std::string prompts_log = (fs::path(c.logging.run_dir) / kTrainedPromptsFile).string();

  // Rank 0: the controller service and the first published weights.
  std::unique_ptr<ControllerHost> host;
  if (rank == 0) {
    auto started = start_controller(job, model_config, rollout_dtype, (*learner)->version(),
                                    resumed.controller_snapshot);
    if (!started.ok()) return started.status();
    host = std::move(*started);
    FLYWHEEL_RETURN_IF_ERROR(
        trainer::ControllerBatchSource::truncate_prompts_log(prompts_log, (*learner)->version()));
  }
  // The controller's address for the rollout ranks of an MPMD job (and the launcher's file).
  const std::string address = comm::broadcast_string(*roles.world, host ? host->address : "");
  // weight_sync.transport mpi / nccl: rank 0 also broadcasts every version to the MPMD job's
  // rollout ranks (the controller keeps serving it over gRPC, and checks the workers' acks).
  comm::WeightGroup weight_group;
  if (core::weight_transport(c.weight_sync) != core::WeightTransport::kGrpc) {
    auto joined = comm::join_weight_group(
        roles, comm::Role::kLearner, c,
        model::uses_cuda(c.model.device) ? comm::local_cuda_device(rank) : -1);
    if (!joined.ok()) return joined.status();
    weight_group = std::move(*joined);
  }
  trainer::WeightTargets targets;
  if (host) {
    targets.store = host->weights.get();
    targets.channel = weight_group.channel.get();
    // The controller accepts trajectories of version v from when it is published, not only
    // from when the loop's step hook runs: a worker can receive v (over the weight channel, or
    // from the store) and push with it in between.
    targets.published = [controller = host->core.get()](int64_t v) {
      controller->set_weights_version(v);
      controller->set_version(v);
    };
  }
  trainer::WeightPublisher publisher({rollout_dtype, c.weight_sync.bucket_bytes},
                                     &(*learner)->policy(), std::move(targets));
  FLYWHEEL_RETURN_IF_ERROR(publisher.publish((*learner)->version()));
  if (host) {
    std::error_code ec;
    fs::create_directories(c.logging.run_dir, ec);
    FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(
        (fs::path(c.logging.run_dir) / "controller_address").string(), address + "\n"));
    FLYWHEEL_LOG_INFO("controller listening on %s; %d prompts, %d learner rank(s)", address,
                      host->setup.dataset->size(), size);
  }

  // Held-out evaluation on the learners' full weights.
  eval::HeldOutEvaluation evaluation;
  if (!c.data.eval_path.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(evaluation.set_up(c, *job.registry, job.config_dir(), model_config,
                                               tokenizers, c.data.eval_path));
  }
  std::unique_ptr<core::MetricsLogger> metrics;
  if (rank == 0) {
    auto created = trainer::make_metrics_logger(
        c, *job.registry, c.trainer.total_steps,
        {"critic/score/mean", "eval/accuracy", "perf/throughput", "async/staleness_max"});
    if (!created.ok()) return created.status();
    metrics = std::move(*created);
  }
  auto log = [&](const std::string& name, double value, int64_t step) {
    if (metrics) metrics->log_scalar(name, value, step);
  };

  trainer::RlLoopHooks hooks;
  hooks.publish = [&](int64_t version) { return publisher.publish(version); };
  hooks.log = log;
  if (evaluation.evaluator) {
    hooks.evaluate = [&](int64_t step) -> absl::Status {
      FLYWHEEL_ASSIGN_OR_RETURN(
          eval::HeldOutEvalResult r,
          evaluation.evaluator->evaluate((*learner)->policy(), evaluation.data.records, learners));
      eval::log_eval_result(r,
                            [&](const std::string& name, double value) { log(name, value, step); });
      if (std::isnan(evaluation.first_accuracy)) evaluation.first_accuracy = r.accuracy;
      evaluation.last_accuracy = r.accuracy;
      return absl::OkStatus();
    };
  }
  trainer::CheckpointSaveOptions save_options;
  save_options.keep_last = c.checkpoint.keep_last;
  absl::StatusOr<std::map<std::string, std::string>> side_files =
      trainer::checkpoint_side_files(tokenizers.dir);
  if (!side_files.ok()) return side_files.status();
  save_options.extra_files = std::move(*side_files);
  hooks.save = [&](int64_t step, int64_t violations) {
    trainer::CheckpointSaveOptions o = save_options;
    if (host) o.extra_files[trainer::kControllerFile] = host->core->snapshot();
    o.extra_files[trainer::kLearnerStateFile] =
        absl::StrCat("{\"staleness_violations\": ", violations, "}\n");
    return trainer::save_checkpoint(**learner, checkpoints, step, o);
  };
  hooks.stepped = [&](int64_t step) {
    if (host) host->stepped(step, log);
  };

  trainer::RlLoopOptions loop_options;
  loop_options.total_steps = c.trainer.total_steps;
  loop_options.max_staleness = c.buffer.max_staleness;
  loop_options.publish_every_steps = c.weight_sync.every_steps;
  loop_options.eval_every_steps = c.eval.every_steps;
  loop_options.checkpoint_every_steps = c.checkpoint.every_steps;
  loop_options.violations = resumed.violations;
  loop_options.saved_step = resume_from.empty() ? -1 : (*learner)->version();
  std::unique_ptr<trainer::ControllerBatchSource> from_controller;
  if (host) {
    trainer::ControllerBatchOptions o;
    o.groups_per_step = c.trainer.groups_per_step;
    o.total_steps = c.trainer.total_steps;
    o.no_progress_timeout_s = c.trainer.no_progress_timeout_s;
    // The other ranks wait for the batch in a collective: they hear "wait" well within its
    // timeout, so that waiting for rollouts is never mistaken for a stuck rank 0.
    o.wait_answer_s = std::min(o.wait_answer_s, c.cluster.collective_timeout_s / 4);
    o.prompts_log = prompts_log;
    o.workers_logs = absl::StrCat(c.logging.run_dir, "/logs under flywheel train");
    from_controller = std::make_unique<trainer::ControllerBatchSource>(o, host->core.get());
  }
  trainer::BroadcastBatchSource source(&learners, from_controller.get());
  trainer::LearnerStepper stepper(learner->get());
  trainer::RlLoop loop(loop_options, &stepper, std::move(hooks));
  absl::StatusOr<trainer::RlLoopResult> result = loop.run(source, stop);
  if (!result.ok()) return result.status();

  if (metrics) FLYWHEEL_RETURN_IF_ERROR(metrics->flush());
  if (weight_group.channel) weight_group.channel->close();
  if (host) {
    // Until every live worker heard that training is over and what they still push is taken, so
    // that no worker finds the controller gone mid-push.
    if (!from_controller->settle(c.buffer.drain_timeout_s)) {
      FLYWHEEL_LOG_WARN(
          "after buffer.drain_timeout_s (%.0f s): %d prompts still leased, or a "
          "worker not yet told that training is over",
          c.buffer.drain_timeout_s, host->core->in_flight());
    }
    host->server->shutdown();
  }
  const int64_t step = result->last_step;
  std::string exported;
  if (c.checkpoint.export_hf && rank == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        exported,
        trainer::export_run((fs::path(checkpoints) / absl::StrCat("step_", step)).string(),
                            "policy", c.logging.run_dir, rollout_dtype));
  }
  if (rank == 0) {
    const std::string& by = result->stopped_by;
    std::cout << absl::StrFormat(
        "flywheel learner: %d steps in %.1f s%s; held-out accuracy %.3f -> %.3f; %d staleness "
        "violations%s%s\n",
        step, result->seconds, by.empty() ? "" : " (stopped by " + by + ")",
        evaluation.first_accuracy, evaluation.last_accuracy, result->violations,
        host->lost_summary(), exported.empty() ? "" : "; exported to " + exported);
  }
  return absl::OkStatus();
}

}  // namespace flywheel::jobs
