#include "flywheel/trainer/sft_trainer.h"

#include <cmath>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/micro_batch.h"

namespace flywheel::trainer {

absl::StatusOr<std::unique_ptr<SftTrainer>> SftTrainer::create(const SftOptions& options,
                                                               const model::ModelConfig& config,
                                                               comm::Communicator* comm) {
  if (options.micro_batch_tokens < 1) {
    return absl::InvalidArgumentError("micro_batch_tokens must be >= 1");
  }
  std::unique_ptr<SftTrainer> sft(new SftTrainer(options, comm));
  // The load-balancing loss counts every sample's prompt tokens.
  if (wants_load_balancing(config)) sft->options_.shared_prefix = false;
  ShardingOptions sharding = options.sharding;
  sharding.value_head = false;
  sharding.load_balancing = true;  // when the config asks for it
  auto model = ShardedDecoder::create(config, comm, sharding);
  if (!model.ok()) return model.status();
  sft->model_ = std::move(*model);
  sft->optimizer_ = ShardedAdamW::for_model(*sft->model_, options.adamw);
  FLYWHEEL_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr));
  sft->schedule_ = schedule;
  return sft;
}

absl::StatusOr<std::pair<double, double>> SftTrainer::run(
    const std::vector<const SftExample*>& examples, bool train, double denominator) {
  int64_t longest = 1;
  for (const SftExample* e : examples) {
    longest = std::max<int64_t>(longest, e->response.size());
  }
  at::Tensor widest = at::full({1}, longest, at::kLong);
  comm_->all_reduce_host(widest, comm::ReduceOp::kMax);
  const int64_t R = widest.item<int64_t>();
  std::vector<SequenceTokens> tokens;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < examples.size(); ++i) {
    tokens.push_back({&examples[i]->prompt, &examples[i]->response});
    ids.push_back(static_cast<int64_t>(i));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(BalancedMicroBatches packed,
                            pack_balanced(tokens, ids, options_.pack_options(R), *comm_));
  std::unique_ptr<at::NoGradGuard> no_grad;
  if (!train) no_grad = std::make_unique<at::NoGradGuard>();
  double logprob_sum = 0, count = 0;
  for (const MicroBatch& mb : packed.micro_batches) {
    TokenOutputs out = model_->forward(mb.batch);
    at::Tensor lp = unpack(mb, out.logprobs);
    at::Tensor sum = lp.sum();  // unpack() zeroed the positions past each response
    logprob_sum += sum.item<double>();
    count += mb.valid.sum().item<double>();
    if (train) {
      at::Tensor loss = -sum / denominator;
      if (out.aux_loss.defined()) {
        // The mixture of experts' load-balancing loss, weighted by this micro-batch's share of
        // the step's tokens on every rank (transformers adds it per batch).
        const double share = mb.valid.sum().item<double>() / denominator;
        loss = loss + model_->config().router_aux_loss_coef * share * out.aux_loss;
        aux_loss_ += share * out.aux_loss.item<double>();
      }
      loss.backward();
    }
  }
  return std::make_pair(logprob_sum, count);
}

absl::StatusOr<std::map<std::string, double>> SftTrainer::step(
    const std::vector<const SftExample*>& examples) {
  at::Tensor tokens = at::zeros({1}, at::kDouble);
  for (const SftExample* e : examples) tokens += static_cast<double>(e->response.size());
  comm_->all_reduce_host(tokens, comm::ReduceOp::kSum);
  const double total = std::max(1.0, tokens.item<double>());
  aux_loss_ = 0;
  absl::StatusOr<std::pair<double, double>> sums = run(examples, /*train=*/true, total);
  if (!sums.ok()) return sums.status();
  const double lr = schedule_->at(counters_.steps);
  const ShardedAdamW::Update u =
      optimizer_->finish_update(-sums->first / total, lr, options_.grad_clip);
  FLYWHEEL_RETURN_IF_ERROR(counters_.count(u, options_.max_consecutive_skips, "SFT"));
  std::map<std::string, double> metrics{{"sft/loss", u.loss},
                                        {"sft/grad_norm", u.grad_norm},
                                        {"sft/lr", lr},
                                        {"sft/tokens", total},
                                        {"sft/skipped", u.applied ? 0.0 : 1.0}};
  if (wants_load_balancing(model_->config())) {
    at::Tensor aux = at::full({1}, aux_loss_, at::kDouble);
    comm_->all_reduce_host(aux, comm::ReduceOp::kSum);
    metrics["sft/aux_loss"] = aux.item<double>();
  }
  return metrics;
}

absl::StatusOr<double> SftTrainer::eval_loss(const std::vector<const SftExample*>& examples) {
  absl::StatusOr<std::pair<double, double>> sums = run(examples, /*train=*/false, 1.0);
  if (!sums.ok()) return sums.status();
  at::Tensor both = at::tensor({sums->first, sums->second}, at::kDouble);
  comm_->all_reduce_host(both, comm::ReduceOp::kSum);
  const double count = both[1].item<double>();
  return count > 0 ? -both[0].item<double>() / count : 0.0;
}

TrainingState SftTrainer::training_state() {
  return policy_training_state(*model_, *optimizer_, counters_);
}

void SftTrainer::restore(const std::map<std::string, double>& scalars) {
  counters_.restore(scalars);
}

}  // namespace flywheel::trainer
