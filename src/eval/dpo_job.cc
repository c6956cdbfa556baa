#include "flywheel/eval/dpo_job.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/eval/data_loop.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/learner_job.h"
#include "flywheel/trainer/learner_weights.h"

namespace flywheel::eval {
namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The pairs whose index is rank modulo world.
std::vector<const trainer::PreferenceExample*> rank_share(const trainer::PreferenceData& data,
                                                          int rank, int world) {
  std::vector<const trainer::PreferenceExample*> mine;
  for (size_t i = rank; i < data.pairs.size(); i += world) mine.push_back(&data.pairs[i]);
  return mine;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DpoJob>> DpoJob::create(const core::Config& config,
                                                       comm::Communicator* world,
                                                       core::PluginRegistry& registry,
                                                       const std::string& config_dir,
                                                       bool reward_model) {
  const core::Config& c = config;
  if (c.model.path.empty()) return absl::InvalidArgumentError("model.path must be set");
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  std::unique_ptr<DpoJob> job(new DpoJob(config, world, reward_model));
  job->batch_size_ = reward_model ? c.rm.batch_size : c.dpo.batch_size;
  job->eval_every_ = reward_model ? c.rm.eval_every : c.dpo.eval_every;
  FLYWHEEL_RETURN_IF_ERROR(job->load_data());

  job->options_.optimizer = trainer::OptimizerOptions::from_config(c.trainer, c.model.path);
  job->options_.reward_model = reward_model;
  if (reward_model) {
    job->options_.loss.loss = "bradley_terry";
    job->options_.loss.center_coefficient = c.rm.center_coefficient;
  } else {
    job->options_.loss.loss = c.dpo.loss;
    job->options_.loss.beta = c.dpo.beta;
    job->options_.loss.label_smoothing = c.dpo.label_smoothing;
    job->options_.loss.simpo_gamma = c.dpo.simpo_gamma;
    job->options_.loss.rpo_alpha = c.dpo.rpo_alpha;
  }
  auto dpo = trainer::DpoTrainer::create(job->options_, *job->model_config_, world);
  if (!dpo.ok()) return dpo.status();
  job->dpo_ = std::move(*dpo);
  FLYWHEEL_RETURN_IF_ERROR(job->compute_reference());

  FLYWHEEL_ASSIGN_OR_RETURN(job->checkpoints_,
                            trainer::DataCheckpoints::create(c, job->tokenizers_->dir));
  FLYWHEEL_RETURN_IF_ERROR(job->resume());

  if (world->rank() == 0) {
    auto created = trainer::make_metrics_logger(c, registry, c.trainer.total_steps);
    if (!created.ok()) return created.status();
    job->metrics_ = std::move(*created);
  }
  if (!reward_model && job->eval_pairs_ && job->eval_pairs_->with_answer > 0) {
    FLYWHEEL_RETURN_IF_ERROR(job->greedy_.emplace().set_up(
        c, registry, config_dir, *job->model_config_, *job->tokenizers_, c.data.eval_path));
  }
  return job;
}

absl::Status DpoJob::load_data() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(c_.model.path) / "config.json").string()));
  model_config_ = std::move(model_config);
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c_.tokenizer, c_.model.path));
  tokenizers_ = std::move(tokenizers);
  trainer::PreferenceDataOptions o =
      trainer::PreferenceDataOptions::from_config(c_, model_config_->vocab_size);
  // A reward model scores a response as reward_model reads it: its text, no eos appended.
  o.eos_id =
      model_config_->eos_token_ids.empty() || reward_model_ ? -1 : model_config_->eos_token_ids[0];
  const model::ChatTemplate* chat =
      tokenizers_->chat_template ? &*tokenizers_->chat_template : nullptr;
  FLYWHEEL_ASSIGN_OR_RETURN(
      trainer::PreferenceData train,
      trainer::load_preference_data(c_.data.train_path, o, *tokenizers_->tokenizer, chat));
  train_ = std::move(train);
  if (!c_.data.eval_path.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        trainer::PreferenceData loaded,
        trainer::load_preference_data(c_.data.eval_path, o, *tokenizers_->tokenizer, chat));
    eval_pairs_ = std::move(loaded);
  }
  if (world_->rank() == 0) {
    FLYWHEEL_LOG_INFO(
        "%d training pairs (%d longer than model.max_seq_len skipped), %d held out; %s; %d "
        "learner rank(s), batch %d",
        train_->pairs.size(), train_->skipped_too_long, eval_pairs_ ? eval_pairs_->pairs.size() : 0,
        reward_model_ ? "a Bradley-Terry reward model"
                      : absl::StrFormat("loss %s, beta %g", c_.dpo.loss, c_.dpo.beta),
        world_->size(), batch_size_);
  }
  return absl::OkStatus();
}

absl::Status DpoJob::load_model() {
  const uint64_t seed = static_cast<uint64_t>(c_.trainer.seed);
  if (reward_model_) return trainer::load_value_model(dpo_->model(), c_.model.path, seed);
  return trainer::load_or_init(dpo_->model(), model::open_hf_weights(c_.model.path), c_.model.path,
                               seed);
}

absl::Status DpoJob::compute_reference() {
  std::vector<trainer::PreferenceExample*> missing;
  if (options_.loss.uses_reference()) {
    for (std::optional<trainer::PreferenceData>* data : {&train_, &eval_pairs_}) {
      if (!data->has_value()) continue;
      for (trainer::PreferenceExample& pair : (*data)->pairs) {
        if (!std::isfinite(pair.ref_chosen)) missing.push_back(&pair);
      }
    }
  }
  const std::string& reference = c_.dpo.reference_path;
  if (missing.empty() || reference.empty()) FLYWHEEL_RETURN_IF_ERROR(load_model());
  if (missing.empty()) return absl::OkStatus();
  if (!reference.empty()) {
    absl::StatusOr<model::DecoderModel::TensorLookup> weights = model::open_hf_weights(reference);
    if (!weights.ok()) {
      return absl::Status(weights.status().code(),
                          absl::StrCat("dpo.reference_path: ", weights.status().message()));
    }
    absl::Status loaded = dpo_->model().load(*weights);
    if (!loaded.ok()) {
      return absl::Status(loaded.code(),
                          absl::StrCat("dpo.reference_path ", reference, ": ", loaded.message()));
    }
  }
  // Each rank scores its share; the sums travel to every rank.
  const auto start = std::chrono::steady_clock::now();
  const int rank = world_->rank(), size = world_->size();
  std::vector<trainer::PreferenceExample*> mine;
  for (size_t i = rank; i < missing.size(); i += size) mine.push_back(missing[i]);
  FLYWHEEL_RETURN_IF_ERROR(dpo_->set_reference(mine));
  at::Tensor logps = at::zeros({static_cast<int64_t>(2 * missing.size())}, at::kDouble);
  for (size_t i = rank; i < missing.size(); i += size) {
    logps[2 * i] = missing[i]->ref_chosen;
    logps[2 * i + 1] = missing[i]->ref_rejected;
  }
  world_->all_reduce_host(logps, comm::ReduceOp::kSum);
  const double* all = logps.data_ptr<double>();
  for (size_t i = 0; i < missing.size(); ++i) {
    missing[i]->ref_chosen = all[2 * i];
    missing[i]->ref_rejected = all[2 * i + 1];
  }
  if (rank == 0) {
    FLYWHEEL_LOG_INFO("reference log-probs of %d pairs (%s) in %.1f s", missing.size(),
                      reference.empty() ? "the initial policy, " + c_.model.path : reference,
                      seconds_since(start));
  }
  if (!reference.empty()) FLYWHEEL_RETURN_IF_ERROR(load_model());
  return absl::OkStatus();
}

absl::Status DpoJob::resume() {
  FLYWHEEL_ASSIGN_OR_RETURN(
      auto scalars, checkpoints_->resume(dpo_->training_state(), *world_,
                                         static_cast<int64_t>(train_->pairs.size()), &cursor_));
  if (!scalars.empty()) dpo_->restore(scalars);
  return absl::OkStatus();
}

absl::Status DpoJob::save(int64_t step) {
  return checkpoints_->save(dpo_->training_state(), *world_, step, cursor_,
                            static_cast<int64_t>(train_->pairs.size()));
}

void DpoJob::log(const std::string& name, double value, int64_t step) {
  if (metrics_) metrics_->log_scalar(name, value, step);
}

absl::StatusOr<DpoEvalResult> DpoJob::evaluate(int64_t step) {
  DpoEvalResult r;
  if (eval_pairs_) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        auto m, dpo_->evaluate(rank_share(*eval_pairs_, world_->rank(), world_->size())));
    for (const auto& [name, value] : m) log("eval/" + name, value, step);
    r.preference_accuracy = m.at("rewards/accuracies");
    r.margin = m.at("rewards/margins");
    r.loss = m.at(dpo_->metric_prefix() + "loss");
  }
  if (greedy_) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        HeldOutEvalResult greedy,
        greedy_->evaluator->evaluate(dpo_->model(), greedy_->data.records, *world_));
    r.accuracy = greedy.accuracy;
    log_eval_result(greedy, [&](const std::string& name, double value) { log(name, value, step); });
  }
  return r;
}

absl::StatusOr<DpoSummary> DpoJob::run(const std::function<bool()>& stop) {
  const trainer::SftBatchOptions batch{batch_size_, c_.data.shuffle,
                                       static_cast<uint64_t>(c_.data.seed)};
  DpoSummary summary;
  FLYWHEEL_ASSIGN_OR_RETURN(summary.first, evaluate(dpo_->steps()));
  summary.last = summary.first;
  const auto start = std::chrono::steady_clock::now();
  double pairs = 0;
  DataLoopHooks hooks;
  hooks.steps = [this] { return dpo_->steps(); };
  hooks.step = [&]() -> absl::StatusOr<int64_t> {
    std::vector<const trainer::PreferenceExample*> mine;
    for (int64_t i : trainer::next_batch_indices(static_cast<int64_t>(train_->pairs.size()),
                                                 &cursor_, batch, world_->rank(), world_->size())) {
      mine.push_back(&train_->pairs[i]);
    }
    FLYWHEEL_ASSIGN_OR_RETURN(auto m, dpo_->step(mine));
    const int64_t step = dpo_->steps();
    const std::string& prefix = dpo_->metric_prefix();
    pairs += m.at(prefix + "pairs");
    for (const auto& [name, value] : m) log(name, value, step);
    log(prefix + "pairs_per_s", pairs / std::max(seconds_since(start), 1e-9), step);
    return step;
  };
  hooks.evaluate = [&](int64_t step) -> absl::Status {
    FLYWHEEL_ASSIGN_OR_RETURN(summary.last, evaluate(step));
    return absl::OkStatus();
  };
  hooks.save = [this](int64_t step) { return save(step); };
  FLYWHEEL_ASSIGN_OR_RETURN(summary.stopped_by, run_data_loop({c_.trainer.total_steps, eval_every_,
                                                               c_.checkpoint.every_steps},
                                                              hooks, stop, *world_));
  summary.steps = dpo_->steps();
  if (metrics_) FLYWHEEL_RETURN_IF_ERROR(metrics_->flush());
  if (c_.checkpoint.export_hf && world_->rank() == 0) {
    FLYWHEEL_ASSIGN_OR_RETURN(summary.exported,
                              checkpoints_->export_last(reward_model_ ? "critic" : "policy",
                                                        options_.optimizer.sharding.param_dtype));
  }
  return summary;
}

}  // namespace flywheel::eval
