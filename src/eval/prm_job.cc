#include "flywheel/eval/prm_job.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/eval/data_loop.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"
#include "flywheel/trainer/learner_job.h"
#include "flywheel/trainer/learner_weights.h"

namespace flywheel::eval {
namespace {

namespace fs = std::filesystem;

// The examples whose index is rank modulo world.
std::vector<const trainer::StepExample*> rank_share(const trainer::StepData& data, int rank,
                                                    int world) {
  std::vector<const trainer::StepExample*> mine;
  for (size_t i = rank; i < data.examples.size(); i += world) mine.push_back(&data.examples[i]);
  return mine;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrmJob>> PrmJob::create(const core::Config& config,
                                                       comm::Communicator* world,
                                                       core::PluginRegistry& registry) {
  const core::Config& c = config;
  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  std::unique_ptr<PrmJob> job(new PrmJob(config, world));
  FLYWHEEL_RETURN_IF_ERROR(job->load_data());
  job->optimizer_ = trainer::OptimizerOptions::from_config(c.trainer, c.model.path);
  FLYWHEEL_ASSIGN_OR_RETURN(job->prm_, trainer::ProcessRewardTrainer::create(
                                           job->optimizer_, *job->model_config_, world));
  FLYWHEEL_RETURN_IF_ERROR(trainer::load_value_model(job->prm_->model(), c.model.path,
                                                     static_cast<uint64_t>(c.trainer.seed)));
  FLYWHEEL_ASSIGN_OR_RETURN(job->checkpoints_,
                            trainer::DataCheckpoints::create(c, job->tokenizer_dir_));
  FLYWHEEL_ASSIGN_OR_RETURN(
      auto scalars,
      job->checkpoints_->resume(job->prm_->training_state(), *world,
                                static_cast<int64_t>(job->train_->examples.size()), &job->cursor_));
  if (!scalars.empty()) job->prm_->restore(scalars);
  if (world->rank() == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(job->metrics_,
                              trainer::make_metrics_logger(c, registry, c.trainer.total_steps));
  }
  return job;
}

absl::Status PrmJob::load_data() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(c_.model.path) / "config.json").string()));
  model_config_ = std::move(model_config);
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c_.tokenizer, c_.model.path));
  tokenizer_dir_ = tokenizers.dir;
  const trainer::StepDataOptions o =
      trainer::StepDataOptions::from_config(c_, model_config_->vocab_size);
  FLYWHEEL_ASSIGN_OR_RETURN(trainer::StepData train,
                            trainer::load_step_data(c_.data.train_path, o, *tokenizers.tokenizer));
  train_ = std::move(train);
  if (!c_.data.eval_path.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(trainer::StepData held_out,
                              trainer::load_step_data(c_.data.eval_path, o, *tokenizers.tokenizer));
    eval_ = std::move(held_out);
  }
  if (world_->rank() == 0) {
    FLYWHEEL_LOG_INFO(
        "%d training completions (%d steps, %.1f%% labelled correct; %d longer than "
        "model.max_seq_len skipped), %d held out; a process reward model; %d learner rank(s), "
        "batch %d",
        train_->examples.size(), train_->steps,
        100.0 * static_cast<double>(train_->positive) / std::max<int64_t>(1, train_->steps),
        train_->skipped_too_long, eval_ ? eval_->examples.size() : 0, world_->size(),
        c_.rm.batch_size);
  }
  return absl::OkStatus();
}

void PrmJob::log(const std::string& name, double value, int64_t step) {
  if (metrics_) metrics_->log_scalar(name, value, step);
}

absl::StatusOr<PrmEvalResult> PrmJob::evaluate(int64_t step) {
  PrmEvalResult r;
  if (!eval_) return r;
  FLYWHEEL_ASSIGN_OR_RETURN(auto m,
                            prm_->evaluate(rank_share(*eval_, world_->rank(), world_->size())));
  for (const auto& [name, value] : m) log("eval/" + name, value, step);
  r.step_accuracy = m.at("prm/accuracy");
  r.outcome_accuracy = m.at("prm/outcome_accuracy");
  r.loss = m.at("prm/loss");
  return r;
}

absl::Status PrmJob::save(int64_t step) {
  return checkpoints_->save(prm_->training_state(), *world_, step, cursor_,
                            static_cast<int64_t>(train_->examples.size()));
}

absl::StatusOr<PrmSummary> PrmJob::run(const std::function<bool()>& stop) {
  const trainer::SftBatchOptions batch{c_.rm.batch_size, c_.data.shuffle,
                                       static_cast<uint64_t>(c_.data.seed)};
  PrmSummary summary;
  FLYWHEEL_ASSIGN_OR_RETURN(summary.first, evaluate(prm_->steps()));
  summary.last = summary.first;
  const auto start = std::chrono::steady_clock::now();
  double completions = 0;
  DataLoopHooks hooks;
  hooks.steps = [this] { return prm_->steps(); };
  hooks.step = [&]() -> absl::StatusOr<int64_t> {
    std::vector<const trainer::StepExample*> mine;
    for (int64_t i : trainer::next_batch_indices(static_cast<int64_t>(train_->examples.size()),
                                                 &cursor_, batch, world_->rank(), world_->size())) {
      mine.push_back(&train_->examples[i]);
    }
    FLYWHEEL_ASSIGN_OR_RETURN(auto m, prm_->step(mine));
    const int64_t step = prm_->steps();
    completions += m.at("prm/completions");
    for (const auto& [name, value] : m) log(name, value, step);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log("prm/completions_per_s", completions / std::max(seconds, 1e-9), step);
    return step;
  };
  hooks.evaluate = [&](int64_t step) -> absl::Status {
    FLYWHEEL_ASSIGN_OR_RETURN(summary.last, evaluate(step));
    return absl::OkStatus();
  };
  hooks.save = [this](int64_t step) { return save(step); };
  FLYWHEEL_ASSIGN_OR_RETURN(
      summary.stopped_by,
      run_data_loop({c_.trainer.total_steps, c_.rm.eval_every, c_.checkpoint.every_steps}, hooks,
                    stop, *world_));
  summary.steps = prm_->steps();
  if (metrics_) FLYWHEEL_RETURN_IF_ERROR(metrics_->flush());
  if (c_.checkpoint.export_hf && world_->rank() == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(summary.exported,
                              checkpoints_->export_last("prm", optimizer_.sharding.param_dtype));
  }
  return summary;
}

}  // namespace flywheel::eval
