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
#include "flywheel/model/cpu/cpu_allocator.h"
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

// One learner rank, assembled step by step by run(): the learners' communicator, the learner and
// its weights, rank 0's controller, the weight publisher, evaluation, metrics and checkpoints,
// then trainer::RlLoop over them. Members are declared in the order they are built, so that each
// is destroyed before what it points into.
class RlLearnerJob {
 public:
  RlLearnerJob(const JobSetup& job, comm::MpiRuntime& mpi)
      : job_(job),
        c_(job.loaded.config),
        mpi_(mpi),
        checkpoints_(trainer::checkpoint_dir(c_)),
        prompts_log_((fs::path(c_.logging.run_dir) / kTrainedPromptsFile).string()) {}

  absl::Status run(const std::function<bool()>& stop);

 private:
  // The MPMD world and the learners' communicator (NCCL on GPUs, else MPI).
  absl::Status join();
  // The model's config and tokenizer, the learner with its initial weights.
  absl::Status load_learner();
  // From trainer.resume: the learners' state, and (rank 0) the controller's from the same step.
  absl::Status resume();
  // Rank 0: the controller, serving. Every rank: the weight publisher and the first version.
  absl::Status host_controller();
  // Held-out evaluation, metrics (rank 0) and what every checkpoint carries.
  absl::Status set_up_reporting();
  trainer::RlLoopHooks loop_hooks();
  trainer::RlLoopOptions loop_options() const;
  // Rank 0: the batches from the controller; every rank receives them from rank 0.
  void set_up_batches();
  // After the loop: the workers told and drained, the export, the summary line.
  absl::Status finish(const trainer::RlLoopResult& result);

  void log(const std::string& name, double value, int64_t step) {
    if (metrics_) metrics_->log_scalar(name, value, step);
  }

  const JobSetup& job_;
  const core::Config& c_;
  comm::MpiRuntime& mpi_;
  const std::string checkpoints_, prompts_log_;

  comm::MpmdWorld roles_;
  std::unique_ptr<comm::Communicator> nccl_;
  comm::Communicator* learners_ = nullptr;  // nccl_ or roles_.role
  int rank_ = 0;

  model::ModelConfig model_config_;
  model::TokenizerSetup tokenizers_;
  at::ScalarType rollout_dtype_ = at::kFloat;
  std::unique_ptr<trainer::Learner> learner_;

  std::string resume_from_;
  trainer::ResumedState resumed_;

  std::unique_ptr<ControllerHost> host_;  // rank 0
  comm::WeightGroup weight_group_;        // weight_sync.transport mpi / nccl
  std::unique_ptr<trainer::WeightPublisher> publisher_;

  eval::HeldOutEvaluation evaluation_;
  std::unique_ptr<core::MetricsLogger> metrics_;  // rank 0
  trainer::CheckpointSaveOptions save_options_;

  std::unique_ptr<trainer::ControllerBatchSource> from_controller_;  // rank 0
  std::unique_ptr<trainer::BroadcastBatchSource> batches_;
};

absl::Status RlLearnerJob::run(const std::function<bool()>& stop) {
  FLYWHEEL_RETURN_IF_ERROR(join());
  FLYWHEEL_RETURN_IF_ERROR(load_learner());
  FLYWHEEL_RETURN_IF_ERROR(resume());
  FLYWHEEL_RETURN_IF_ERROR(host_controller());
  FLYWHEEL_RETURN_IF_ERROR(set_up_reporting());
  set_up_batches();
  trainer::LearnerStepper stepper(learner_.get());
  trainer::RlLoop loop(loop_options(), &stepper, loop_hooks());
  FLYWHEEL_ASSIGN_OR_RETURN(trainer::RlLoopResult result, loop.run(*batches_, stop));
  return finish(result);
}

absl::Status RlLearnerJob::join() {
  FLYWHEEL_ASSIGN_OR_RETURN(roles_, comm::join_mpmd_world(mpi_, comm::Role::kLearner, c_));
  // GPU learners train over NCCL (bootstrapped over MPI), CPU ones over MPI.
  FLYWHEEL_ASSIGN_OR_RETURN(nccl_, comm::learner_nccl(roles_, c_));
  learners_ = nccl_ ? nccl_.get() : roles_.role.get();
  rank_ = learners_->rank();
  core::set_log_prefix("learner", rank_);
  at::set_num_threads(static_cast<int>(c_.cluster.threads_per_process));
  return absl::OkStatus();
}

absl::Status RlLearnerJob::load_learner() {
  if (c_.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  const std::string config_json = (fs::path(c_.model.path) / "config.json").string();
  FLYWHEEL_ASSIGN_OR_RETURN(model_config_, model::ModelConfig::from_file(config_json));
  FLYWHEEL_ASSIGN_OR_RETURN(tokenizers_, model::load_tokenizer_setup(c_.tokenizer, c_.model.path));
  rollout_dtype_ = model::resolve_dtype(c_.model.dtype, model::uses_cuda(c_.model.device));

  trainer::LearnerWeightSources sources;
  std::vector<std::string> weight_names;
  sources.policy = model::open_hf_weights(c_.model.path, &weight_names);
  if (sources.policy.ok()) {
    FLYWHEEL_RETURN_IF_ERROR(model::check_held_layers(model_config_, weight_names, config_json));
  }
  sources.policy_path = c_.model.path;
  sources.reference_path =
      c_.model.reference_path.empty() ? c_.model.path : c_.model.reference_path;
  sources.critic_path = c_.model.critic_path.empty() ? c_.model.path : c_.model.critic_path;
  sources.teacher_path = c_.distill.teacher_path;
  sources.seed = static_cast<uint64_t>(c_.trainer.seed);
  FLYWHEEL_ASSIGN_OR_RETURN(learner_,
                            trainer::Learner::create(c_, model_config_, learners_, *job_.registry));
  FLYWHEEL_RETURN_IF_ERROR(trainer::load_learner_weights(*learner_, sources));
  if (rank_ == 0) {
    FLYWHEEL_LOG_INFO("policy %s",
                      trainer::memory_summary(learner_->policy(), learner_->optimizer()));
  }
  return absl::OkStatus();
}

absl::Status RlLearnerJob::resume() {
  resume_from_ = trainer::resume_path(c_, *learners_);
  if (resume_from_.empty()) return absl::OkStatus();
  FLYWHEEL_RETURN_IF_ERROR(trainer::load_checkpoint(*learner_, resume_from_));
  if (rank_ == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(resumed_, trainer::read_resumed_state(resume_from_));
    FLYWHEEL_LOG_INFO("resumed from %s at version %d", resume_from_, learner_->version());
  }
  return absl::OkStatus();
}

absl::Status RlLearnerJob::host_controller() {
  if (rank_ == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        host_, start_controller(job_, model_config_, rollout_dtype_, learner_->version(),
                                resumed_.controller_snapshot));
    FLYWHEEL_RETURN_IF_ERROR(
        trainer::ControllerBatchSource::truncate_prompts_log(prompts_log_, learner_->version()));
  }
  // The controller's address for the rollout ranks of an MPMD job (and the launcher's file).
  const std::string address = comm::broadcast_string(*roles_.world, host_ ? host_->address : "");
  // weight_sync.transport mpi / nccl: rank 0 also broadcasts every version to the MPMD job's
  // rollout ranks (the controller keeps serving it over gRPC, and checks the workers' acks).
  if (core::weight_transport(c_.weight_sync) != core::WeightTransport::kGrpc) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        weight_group_,
        comm::join_weight_group(
            roles_, comm::Role::kLearner, c_,
            model::uses_cuda(c_.model.device) ? comm::local_cuda_device(rank_) : -1));
  }
  trainer::WeightTargets targets;
  if (host_) {
    targets.store = host_->weights.get();
    targets.channel = weight_group_.channel.get();
    // The controller accepts trajectories of version v from when it is published, not only
    // from when the loop's step hook runs: a worker can receive v (over the weight channel, or
    // from the store) and push with it in between.
    targets.published = [controller = host_->core.get()](int64_t v) {
      controller->set_weights_version(v);
      controller->set_version(v);
    };
  }
  publisher_ = std::make_unique<trainer::WeightPublisher>(
      trainer::WeightPublisherOptions{rollout_dtype_, c_.weight_sync.bucket_bytes},
      &learner_->policy(), std::move(targets));
  FLYWHEEL_RETURN_IF_ERROR(publisher_->publish(learner_->version()));
  if (host_) {
    std::error_code ec;
    fs::create_directories(c_.logging.run_dir, ec);
    FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(
        (fs::path(c_.logging.run_dir) / "controller_address").string(), address + "\n"));
    FLYWHEEL_LOG_INFO("controller listening on %s; %d prompts, %d learner rank(s)", address,
                      host_->setup.dataset->size(), learners_->size());
  }
  return absl::OkStatus();
}

absl::Status RlLearnerJob::set_up_reporting() {
  // Held-out evaluation on the learners' full weights.
  if (!c_.data.eval_path.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(evaluation_.set_up(c_, *job_.registry, job_.config_dir(),
                                                model_config_, tokenizers_, c_.data.eval_path));
  }
  if (rank_ == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        metrics_, trainer::make_metrics_logger(c_, *job_.registry, c_.trainer.total_steps,
                                               {"critic/score/mean", "eval/accuracy",
                                                "perf/throughput", "async/staleness_max"}));
  }
  save_options_.keep_last = c_.checkpoint.keep_last;
  FLYWHEEL_ASSIGN_OR_RETURN(save_options_.extra_files,
                            trainer::checkpoint_side_files(tokenizers_.dir));
  return absl::OkStatus();
}

trainer::RlLoopHooks RlLearnerJob::loop_hooks() {
  trainer::RlLoopHooks hooks;
  hooks.publish = [this](int64_t version) { return publisher_->publish(version); };
  hooks.log = [this](const std::string& name, double value, int64_t step) {
    log(name, value, step);
  };
  if (evaluation_.evaluator) {
    hooks.evaluate = [this](int64_t step) -> absl::Status {
      FLYWHEEL_ASSIGN_OR_RETURN(eval::HeldOutEvalResult r,
                                evaluation_.evaluator->evaluate(
                                    learner_->policy(), evaluation_.data.records, *learners_));
      eval::log_eval_result(r,
                            [&](const std::string& name, double value) { log(name, value, step); });
      if (std::isnan(evaluation_.first_accuracy)) evaluation_.first_accuracy = r.accuracy;
      evaluation_.last_accuracy = r.accuracy;
      return absl::OkStatus();
    };
  }
  hooks.save = [this](int64_t step, int64_t violations) {
    trainer::CheckpointSaveOptions o = save_options_;
    if (host_) o.extra_files[trainer::kControllerFile] = host_->core->snapshot();
    o.extra_files[trainer::kLearnerStateFile] =
        absl::StrCat("{\"staleness_violations\": ", violations, "}\n");
    return trainer::save_checkpoint(*learner_, checkpoints_, step, o);
  };
  hooks.stepped = [this](int64_t step) {
    if (host_) {
      host_->stepped(step, [this](const std::string& name, double value, int64_t at) {
        log(name, value, at);
      });
    }
  };
  return hooks;
}

trainer::RlLoopOptions RlLearnerJob::loop_options() const {
  trainer::RlLoopOptions o;
  o.total_steps = c_.trainer.total_steps;
  o.max_staleness = c_.buffer.max_staleness;
  o.publish_every_steps = c_.weight_sync.every_steps;
  o.eval_every_steps = c_.eval.every_steps;
  o.checkpoint_every_steps = c_.checkpoint.every_steps;
  o.violations = resumed_.violations;
  o.saved_step = resume_from_.empty() ? -1 : learner_->version();
  return o;
}

void RlLearnerJob::set_up_batches() {
  if (host_) {
    trainer::ControllerBatchOptions o;
    o.groups_per_step = c_.trainer.groups_per_step;
    o.total_steps = c_.trainer.total_steps;
    o.no_progress_timeout_s = c_.trainer.no_progress_timeout_s;
    // The other ranks wait for the batch in a collective: they hear "wait" well within its
    // timeout, so that waiting for rollouts is never mistaken for a stuck rank 0.
    o.wait_answer_s = std::min(o.wait_answer_s, c_.cluster.collective_timeout_s / 4);
    o.prompts_log = prompts_log_;
    o.workers_logs = absl::StrCat(c_.logging.run_dir, "/logs under flywheel train");
    from_controller_ = std::make_unique<trainer::ControllerBatchSource>(o, host_->core.get());
  }
  batches_ = std::make_unique<trainer::BroadcastBatchSource>(learners_, from_controller_.get());
}

absl::Status RlLearnerJob::finish(const trainer::RlLoopResult& result) {
  if (metrics_) FLYWHEEL_RETURN_IF_ERROR(metrics_->flush());
  if (weight_group_.channel) weight_group_.channel->close();
  if (host_) {
    // Until every live worker heard that training is over and what they still push is taken, so
    // that no worker finds the controller gone mid-push.
    if (!from_controller_->settle(c_.buffer.drain_timeout_s)) {
      FLYWHEEL_LOG_WARN(
          "after buffer.drain_timeout_s (%.0f s): %d prompts still leased, or a "
          "worker not yet told that training is over",
          c_.buffer.drain_timeout_s, host_->core->in_flight());
    }
    host_->server->shutdown();
  }
  if (rank_ != 0) return absl::OkStatus();
  const int64_t step = result.last_step;
  std::string exported;
  if (c_.checkpoint.export_hf) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        exported,
        trainer::export_run((fs::path(checkpoints_) / absl::StrCat("step_", step)).string(),
                            "policy", c_.logging.run_dir, rollout_dtype_));
  }
  const std::string& by = result.stopped_by;
  std::cout << absl::StrFormat(
      "flywheel learner: %d steps in %.1f s%s; held-out accuracy %.3f -> %.3f; %d staleness "
      "violations%s%s\n",
      step, result.seconds, by.empty() ? "" : " (stopped by " + by + ")",
      evaluation_.first_accuracy, evaluation_.last_accuracy, result.violations,
      host_->lost_summary(), exported.empty() ? "" : "; exported to " + exported);
  return absl::OkStatus();
}

}  // namespace

absl::Status run_rl_learner(const JobSetup& job, comm::MpiRuntime& mpi,
                            const std::function<bool()>& stop) {
  model::keep_freed_cpu_memory_for_reuse(model::FreedMemoryReuse::kLearner);
  RlLearnerJob learner_job(job, mpi);
  return learner_job.run(stop);
}

}  // namespace flywheel::jobs
