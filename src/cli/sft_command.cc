// `flywheel sft CONFIG`: supervised fine-tuning on the sharded learners (run it under mpirun for
// several ranks): masked NLL on response tokens, held-out loss and exact-match accuracy, an
// optional stop on accuracy, checkpoints and resume, and a Hugging Face export at the end.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/stop_signal.h"
#include "flywheel/eval/held_out_eval.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer_setup.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/learner_job.h"
#include "flywheel/trainer/learner_weights.h"
#include "flywheel/trainer/sft_data.h"
#include "flywheel/trainer/sft_trainer.h"
#include "job_setup.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct SftArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

absl::Status run(const SftArgs& args) {
  core::StopSignal stop("flywheel sft");
  absl::StatusOr<JobSetup> job = set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  const core::Config& c = job->loaded.config;
  absl::StatusOr<std::unique_ptr<comm::MpiRuntime>> mpi = comm::MpiRuntime::init(nullptr, nullptr);
  if (!mpi.ok()) return mpi.status();
  auto world = comm::MpiCommunicator::world(**mpi, {"learners", c.cluster.collective_timeout_s});
  if (!world.ok()) return world.status();
  const int rank = (*world)->rank(), size = (*world)->size();
  core::set_log_prefix("sft", rank);
  at::set_num_threads(static_cast<int>(c.cluster.threads_per_process));

  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  absl::StatusOr<model::ModelConfig> model_config =
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string());
  if (!model_config.ok()) return model_config.status();
  absl::StatusOr<model::TokenizerSetup> tokenizers =
      model::load_tokenizer_setup(c.tokenizer, c.model.path);
  if (!tokenizers.ok()) return tokenizers.status();
  const model::Tokenizer& tokenizer = *tokenizers->tokenizer;
  trainer::SftDataOptions data_options =
      trainer::SftDataOptions::from_config(c, model_config->vocab_size);
  data_options.eos_id = model_config->eos_token_ids.empty() ? -1 : model_config->eos_token_ids[0];
  const model::ChatTemplate* chat =
      tokenizers->chat_template ? &*tokenizers->chat_template : nullptr;
  absl::StatusOr<trainer::SftData> train =
      trainer::load_sft_data(c.data.train_path, data_options, tokenizer, chat);
  if (!train.ok()) return train.status();
  std::optional<trainer::SftData> eval_data;
  if (!c.data.eval_path.empty()) {
    absl::StatusOr<trainer::SftData> loaded =
        trainer::load_sft_data(c.data.eval_path, data_options, tokenizer, chat);
    if (!loaded.ok()) return loaded.status();
    eval_data = std::move(*loaded);
  }
  if (rank == 0) {
    FLYWHEEL_LOG_INFO(
        "%d training records (%d longer than model.max_seq_len skipped), %d held out; "
        "%d learner rank(s), batch %d",
        train->records.size(), train->skipped_too_long, eval_data ? eval_data->records.size() : 0,
        size, c.sft.batch_size);
  }

  absl::StatusOr<trainer::SftOptions> options = trainer::OptimizerOptions::from_config(c.trainer);
  if (!options.ok()) return options.status();
  auto sft = trainer::SftTrainer::create(*options, *model_config, world->get());
  if (!sft.ok()) return sft.status();

  FLYWHEEL_RETURN_IF_ERROR(trainer::load_or_init((*sft)->model(),
                                                 model::open_hf_weights(c.model.path), c.model.path,
                                                 static_cast<uint64_t>(c.trainer.seed)));

  // Checkpoints: the tokenizer and generation files travel with them (for export).
  const std::string checkpoints = trainer::checkpoint_dir(c);
  trainer::CheckpointSaveOptions save_options;
  save_options.keep_last = c.checkpoint.keep_last;
  absl::StatusOr<std::map<std::string, std::string>> side_files =
      trainer::checkpoint_side_files(tokenizers->dir);
  if (!side_files.ok()) return side_files.status();
  save_options.extra_files = std::move(*side_files);
  trainer::SftCursor cursor;
  const trainer::SftBatchOptions batch{c.sft.batch_size, c.data.shuffle,
                                       static_cast<uint64_t>(c.data.seed)};
  int64_t last_saved = -1;
  auto save = [&](int64_t step) {
    if (step == last_saved) return absl::OkStatus();  // the final save of a step just saved
    trainer::TrainingState state = (*sft)->training_state();
    state.scalars["data_epoch"] = static_cast<double>(cursor.epoch);
    state.scalars["data_position"] = static_cast<double>(cursor.position);
    state.scalars["data_records"] = static_cast<double>(train->records.size());
    absl::Status saved = trainer::save_checkpoint(state, **world, checkpoints, step, save_options);
    if (saved.ok()) last_saved = step;
    return saved;
  };
  const std::string resume_from = trainer::resume_path(c, **world);
  if (!resume_from.empty()) {
    absl::StatusOr<std::map<std::string, double>> scalars =
        trainer::load_checkpoint((*sft)->training_state(), **world, resume_from);
    if (!scalars.ok()) return scalars.status();
    if (scalars->count("data_records") &&
        static_cast<size_t>(scalars->at("data_records")) != train->records.size()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s was trained on %d records of data.train_path; it now has %d: resume with the same "
          "data (or checkpoint.resume: never)",
          resume_from, static_cast<int64_t>(scalars->at("data_records")), train->records.size()));
    }
    (*sft)->restore(*scalars);
    last_saved = (*sft)->steps();
    cursor.epoch =
        static_cast<int64_t>(scalars->count("data_epoch") ? scalars->at("data_epoch") : 0);
    cursor.position =
        static_cast<int64_t>(scalars->count("data_position") ? scalars->at("data_position") : 0);
    if (rank == 0) {
      FLYWHEEL_LOG_INFO("resumed from %s at step %d", resume_from, (*sft)->steps());
    }
  }

  std::unique_ptr<core::MetricsLogger> metrics;
  if (rank == 0) {
    auto created = trainer::make_metrics_logger(c, *job->registry, c.trainer.total_steps);
    if (!created.ok()) return created.status();
    metrics = std::move(*created);
  }
  auto log = [&](const std::string& name, double value, int64_t step) {
    if (metrics) metrics->log_scalar(name, value, step);
  };

  std::unique_ptr<eval::HeldOutEvaluator> evaluator;
  const bool has_answers =
      eval_data && std::any_of(eval_data->records.begin(), eval_data->records.end(),
                               [](const trainer::SftRecord& r) { return r.has_answer; });
  if (has_answers) {
    eval::HeldOutEvalOptions eo;  // greedy, judged against the answers
    eo.max_new_tokens = c.sft.eval_max_new_tokens;
    eo.stop_ids = model_config->eos_token_ids;
    auto created =
        eval::HeldOutEvaluator::create(*model_config, &tokenizer, eo, eval_data->records);
    if (!created.ok()) return created.status();
    evaluator = std::move(*created);
  }
  struct EvalResult {
    double loss = NAN, accuracy = NAN;
  };
  auto evaluate = [&](int64_t step) -> absl::StatusOr<EvalResult> {
    EvalResult r;
    if (!eval_data) return r;
    absl::StatusOr<double> loss = (*sft)->eval_loss(trainer::rank_share(*eval_data, rank, size));
    if (!loss.ok()) return loss.status();
    r.loss = *loss;
    log("eval/loss", r.loss, step);
    if (evaluator) {
      absl::StatusOr<eval::HeldOutEvalResult> greedy =
          evaluator->evaluate((*sft)->model(), eval_data->records, **world);
      if (!greedy.ok()) return greedy.status();
      r.accuracy = greedy->accuracy;
      log("eval/accuracy", r.accuracy, step);
    }
    return r;
  };

  absl::StatusOr<EvalResult> first = evaluate((*sft)->steps());
  if (!first.ok()) return first.status();
  EvalResult last = *first;
  int64_t last_eval_step = (*sft)->steps();
  std::string stopped_by;
  auto start = std::chrono::steady_clock::now();
  double tokens = 0;
  while ((*sft)->steps() < c.trainer.total_steps) {
    absl::StatusOr<std::map<std::string, double>> m =
        (*sft)->step(trainer::next_sft_batch(*train, &cursor, batch, rank, size));
    if (!m.ok()) return m.status();
    const int64_t step = (*sft)->steps();
    tokens += m->at("sft/tokens");
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& [name, value] : *m) log(name, value, step);
    log("sft/tokens_per_s", tokens / std::max(elapsed, 1e-9), step);
    // Near the stop, evaluate more often: accuracy can climb from 10% to 50% in 10 steps.
    const bool near_stop = c.sft.stop_at_accuracy > 0 && c.sft.eval_every_near_stop > 0 &&
                           last.accuracy >= c.sft.stop_at_accuracy / 2;
    const int64_t every = near_stop ? c.sft.eval_every_near_stop : c.sft.eval_every;
    if (every > 0 && step % every == 0) {
      absl::StatusOr<EvalResult> r = evaluate(step);
      if (!r.ok()) return r.status();
      last = *r;
      last_eval_step = step;
      if (c.sft.stop_at_accuracy > 0 && last.accuracy >= c.sft.stop_at_accuracy) {
        stopped_by =
            absl::StrFormat("held-out accuracy %.3f reached sft.stop_at_accuracy", last.accuracy);
      }
    }
    if (c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
      absl::Status saved = save(step);
      if (!saved.ok()) return saved;
    }
    // Every rank stops together when any got a signal.
    at::Tensor signal = at::full({1}, stop.requested() ? 1 : 0, at::kLong);
    (*world)->all_reduce_host(signal, comm::ReduceOp::kMax);
    if (signal.item<int64_t>() != 0) stopped_by = "a signal";
    if (!stopped_by.empty()) break;
  }
  const int64_t step = (*sft)->steps();
  if (last_eval_step != step) {
    absl::StatusOr<EvalResult> r = evaluate(step);
    if (!r.ok()) return r.status();
    last = *r;
  }
  absl::Status saved = save(step);
  if (!saved.ok()) return saved;
  if (metrics) FLYWHEEL_RETURN_IF_ERROR(metrics->flush());
  std::string exported;
  if (c.checkpoint.export_hf && rank == 0) {
    exported = (fs::path(c.logging.run_dir) / "hf").string();
    absl::Status s =
        trainer::export_checkpoint((fs::path(checkpoints) / absl::StrCat("step_", step)).string(),
                                   "policy", exported, options->sharding.param_dtype);
    if (!s.ok()) return s;
  }
  if (rank == 0) {
    std::cout << absl::StrFormat(
        "flywheel sft: %d steps%s; held-out loss %.4f -> %.4f, accuracy %.3f -> %.3f%s\n", step,
        stopped_by.empty() ? "" : " (stopped by " + stopped_by + ")", first->loss, last.loss,
        first->accuracy, last.accuracy, exported.empty() ? "" : "; exported to " + exported);
  }
  return absl::OkStatus();
}

}  // namespace

void add_sft_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SftArgs>();
  CLI::App* command = app.add_subcommand(
      "sft",
      "Supervised fine-tuning on {\"prompt\", \"response\"} or {\"messages\": [...]} records, "
      "sharded over the ranks of `mpirun -np N flywheel sft ...`");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel sft: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
