#include "flywheel/eval/sft_job.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/learner_job.h"
#include "flywheel/trainer/learner_weights.h"

namespace flywheel::eval {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<SftJob>> SftJob::create(const core::Config& config,
                                                       comm::Communicator* world,
                                                       core::PluginRegistry& registry,
                                                       const std::string& config_dir) {
  const core::Config& c = config;
  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  std::unique_ptr<SftJob> job(new SftJob(config, world));
  FLYWHEEL_RETURN_IF_ERROR(job->load_data());

  job->options_ = trainer::OptimizerOptions::from_config(c.trainer, c.model.path);
  auto sft = trainer::SftTrainer::create(job->options_, *job->model_config_, world);
  if (!sft.ok()) return sft.status();
  job->sft_ = std::move(*sft);
  FLYWHEEL_RETURN_IF_ERROR(trainer::load_or_init(job->sft_->model(),
                                                 model::open_hf_weights(c.model.path), c.model.path,
                                                 static_cast<uint64_t>(c.trainer.seed)));
  if (world->rank() == 0) {
    FLYWHEEL_LOG_INFO("%s", trainer::memory_summary(job->sft_->model(), job->sft_->optimizer()));
  }

  FLYWHEEL_ASSIGN_OR_RETURN(job->checkpoints_,
                            trainer::DataCheckpoints::create(c, job->tokenizers_->dir));
  FLYWHEEL_RETURN_IF_ERROR(job->resume());

  if (world->rank() == 0) {
    auto created = trainer::make_metrics_logger(c, registry, c.trainer.total_steps);
    if (!created.ok()) return created.status();
    job->metrics_ = std::move(*created);
  }
  const std::optional<trainer::SftData>& eval_data = job->eval_data_;
  const bool has_answers =
      eval_data && std::any_of(eval_data->records.begin(), eval_data->records.end(),
                               [](const trainer::SftRecord& r) { return r.has_answer; });
  if (has_answers) {
    HeldOutEvalOptions eo;  // greedy, judged against the answers
    eo.max_new_tokens = c.sft.eval_max_new_tokens;
    eo.stop_ids = job->model_config_->eos_token_ids;
    // With environment.name the held-out prompts run as episodes.
    FLYWHEEL_RETURN_IF_ERROR(set_eval_environment(c, registry, config_dir, *job->tokenizers_, &eo));
    auto created = HeldOutEvaluator::create(*job->model_config_, job->tokenizers_->tokenizer.get(),
                                            eo, eval_data->records);
    if (!created.ok()) return created.status();
    job->evaluator_ = std::move(*created);
  }
  return job;
}

absl::Status SftJob::load_data() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(c_.model.path) / "config.json").string()));
  model_config_ = std::move(model_config);
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c_.tokenizer, c_.model.path));
  tokenizers_ = std::move(tokenizers);
  const model::Tokenizer& tokenizer = *tokenizers_->tokenizer;
  trainer::SftDataOptions data_options =
      trainer::SftDataOptions::from_config(c_, model_config_->vocab_size);
  data_options.eos_id = model_config_->eos_token_ids.empty() ? -1 : model_config_->eos_token_ids[0];
  const model::ChatTemplate* chat =
      tokenizers_->chat_template ? &*tokenizers_->chat_template : nullptr;
  FLYWHEEL_ASSIGN_OR_RETURN(
      trainer::SftData train,
      trainer::load_sft_data(c_.data.train_path, data_options, tokenizer, chat));
  train_ = std::move(train);
  if (!c_.data.eval_path.empty() && !c_.environment.name.empty()) {
    // Episodes: the held-out records are prompts with answers (and the JSON environments read).
    FLYWHEEL_ASSIGN_OR_RETURN(
        trainer::SftData loaded,
        load_eval_data(c_, *tokenizers_, model_config_->vocab_size, c_.data.eval_path));
    eval_data_ = std::move(loaded);
  } else if (!c_.data.eval_path.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        trainer::SftData loaded,
        trainer::load_sft_data(c_.data.eval_path, data_options, tokenizer, chat));
    eval_data_ = std::move(loaded);
  }
  if (world_->rank() == 0) {
    FLYWHEEL_LOG_INFO(
        "%d training records (%d longer than model.max_seq_len skipped), %d held out; "
        "%d learner rank(s), batch %d",
        train_->records.size(), train_->skipped_too_long,
        eval_data_ ? eval_data_->records.size() : 0, world_->size(), c_.sft.batch_size);
  }
  return absl::OkStatus();
}

absl::Status SftJob::resume() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      auto scalars, checkpoints_->resume(sft_->training_state(), *world_,
                                         static_cast<int64_t>(train_->records.size()), &cursor_));
  if (!scalars.empty()) sft_->restore(scalars);
  return absl::OkStatus();
}

absl::Status SftJob::save(int64_t step) {
  return checkpoints_->save(sft_->training_state(), *world_, step, cursor_,
                            static_cast<int64_t>(train_->records.size()));
}

void SftJob::log(const std::string& name, double value, int64_t step) {
  if (metrics_) metrics_->log_scalar(name, value, step);
}

absl::StatusOr<SftEvalResult> SftJob::evaluate(int64_t step) {
  SftEvalResult r;
  if (!eval_data_) return r;
  if (c_.environment.name.empty()) {  // episodes' records have no response to score
    absl::StatusOr<double> loss =
        sft_->eval_loss(trainer::rank_share(*eval_data_, world_->rank(), world_->size()));
    if (!loss.ok()) return loss.status();
    r.loss = *loss;
    log("eval/loss", r.loss, step);
  }
  if (evaluator_) {
    FLYWHEEL_ASSIGN_OR_RETURN(HeldOutEvalResult greedy,
                              evaluator_->evaluate(sft_->model(), eval_data_->records, *world_));
    r.accuracy = greedy.accuracy;
    log_eval_result(greedy, [&](const std::string& name, double value) { log(name, value, step); });
  }
  return r;
}

absl::StatusOr<SftSummary> SftJob::run(const std::function<bool()>& stop) {
  const core::SftOptions& s = c_.sft;
  const trainer::SftBatchOptions batch{s.batch_size, c_.data.shuffle,
                                       static_cast<uint64_t>(c_.data.seed)};
  SftSummary summary;
  FLYWHEEL_ASSIGN_OR_RETURN(SftEvalResult first, evaluate(sft_->steps()));
  summary.first = summary.last = first;
  int64_t last_eval_step = sft_->steps();
  const auto start = std::chrono::steady_clock::now();
  double tokens = 0;
  while (sft_->steps() < c_.trainer.total_steps) {
    absl::StatusOr<std::map<std::string, double>> m = sft_->step(
        trainer::next_sft_batch(*train_, &cursor_, batch, world_->rank(), world_->size()));
    if (!m.ok()) return m.status();
    const int64_t step = sft_->steps();
    tokens += m->at("sft/tokens");
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& [name, value] : *m) log(name, value, step);
    log("sft/tokens_per_s", tokens / std::max(elapsed, 1e-9), step);
    // Near the stop, evaluate more often: accuracy can climb from 10% to 50% in 10 steps.
    const bool near_stop = s.stop_at_accuracy > 0 && s.eval_every_near_stop > 0 &&
                           summary.last.accuracy >= s.stop_at_accuracy / 2;
    const int64_t every = near_stop ? s.eval_every_near_stop : s.eval_every;
    if (every > 0 && step % every == 0) {
      FLYWHEEL_ASSIGN_OR_RETURN(SftEvalResult r, evaluate(step));
      summary.last = r;
      last_eval_step = step;
      if (s.stop_at_accuracy > 0 && summary.last.accuracy >= s.stop_at_accuracy) {
        summary.stopped_by = absl::StrFormat("held-out accuracy %.3f reached sft.stop_at_accuracy",
                                             summary.last.accuracy);
      }
    }
    if (c_.checkpoint.every_steps > 0 && step % c_.checkpoint.every_steps == 0) {
      FLYWHEEL_RETURN_IF_ERROR(save(step));
    }
    if (trainer::on_any_rank(stop(), *world_)) summary.stopped_by = "a signal";
    if (!summary.stopped_by.empty()) break;
  }
  summary.steps = sft_->steps();
  if (last_eval_step != summary.steps) {
    FLYWHEEL_ASSIGN_OR_RETURN(SftEvalResult r, evaluate(summary.steps));
    summary.last = r;
  }
  FLYWHEEL_RETURN_IF_ERROR(save(summary.steps));
  if (metrics_) FLYWHEEL_RETURN_IF_ERROR(metrics_->flush());
  if (c_.checkpoint.export_hf && world_->rank() == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(summary.exported,
                              checkpoints_->export_last("policy", options_.sharding.param_dtype));
  }
  return summary;
}

}  // namespace flywheel::eval
