#include "flywheel/trainer/dpo_trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/micro_batch.h"

namespace flywheel::trainer {
namespace {

// Implicit rewards closer than this many nats (times beta; a reward model's rewards: this much)
// are a tie.
constexpr double kTieNats = 1e-4;

// Response lengths, [2 x pairs] float64 in the chosen / rejected interleaving.
at::Tensor response_lengths(const std::vector<const PreferenceExample*>& examples) {
  std::vector<double> n;
  for (const PreferenceExample* e : examples) {
    n.push_back(static_cast<double>(e->chosen.size()));
    n.push_back(static_cast<double>(e->rejected.size()));
  }
  return at::tensor(n, at::kDouble).view({-1});
}

}  // namespace

absl::StatusOr<std::unique_ptr<DpoTrainer>> DpoTrainer::create(const DpoOptions& options,
                                                               const model::ModelConfig& config,
                                                               comm::Communicator* comm) {
  if (options.optimizer.micro_batch_tokens < 1) {
    return absl::InvalidArgumentError("micro_batch_tokens must be >= 1");
  }
  FLYWHEEL_RETURN_IF_ERROR(options.loss.validate());
  if (options.reward_model != (options.loss.loss == "bradley_terry")) {
    return absl::InvalidArgumentError(
        "a reward model trains with the bradley_terry loss, and only a reward model does");
  }
  FLYWHEEL_RETURN_IF_ERROR(refuse_load_balancing(config, "preference training"));
  std::unique_ptr<DpoTrainer> dpo(new DpoTrainer(options, comm));
  ShardingOptions sharding = options.optimizer.sharding;
  sharding.value_head = options.reward_model;
  auto model = ShardedDecoder::create(config, comm, sharding);
  if (!model.ok()) return model.status();
  dpo->model_ = std::move(*model);
  dpo->optimizer_ = ShardedAdamW::for_model(*dpo->model_, options.optimizer.adamw);
  FLYWHEEL_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.optimizer.lr));
  dpo->schedule_ = schedule;
  return dpo;
}

absl::StatusOr<at::Tensor> DpoTrainer::response_logps(
    const std::vector<const PreferenceExample*>& examples, const at::Tensor* weights) {
  int64_t longest = 1;
  std::vector<SequenceTokens> tokens;
  std::vector<int64_t> ids;
  // A reward model reads the value at each response's last token, which must then be an input:
  // one more token follows it (position P - 1 + j is fed response token j - 1).
  const bool reward_model = options_.reward_model;
  std::vector<std::vector<int32_t>> extended;
  std::vector<int64_t> lengths;
  if (reward_model) extended.reserve(2 * examples.size());
  auto response = [&](const std::vector<int32_t>& r) -> const std::vector<int32_t>* {
    lengths.push_back(static_cast<int64_t>(r.size()));
    if (!reward_model) return &r;
    extended.push_back(r);
    extended.back().push_back(0);
    return &extended.back();
  };
  absl::Status bad;
  for (size_t i = 0; i < examples.size(); ++i) {
    const PreferenceExample* e = examples[i];
    if (e->prompt.empty() || e->chosen.empty() || e->rejected.empty()) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "preference pair ", i, ": the prompt and both responses need at least one token"));
      break;
    }
    const int64_t extra = reward_model ? 1 : 0;
    longest = std::max<int64_t>({longest, static_cast<int64_t>(e->chosen.size()) + extra,
                                 static_cast<int64_t>(e->rejected.size()) + extra});
    tokens.push_back({&e->prompt, response(e->chosen)});
    ids.push_back(static_cast<int64_t>(2 * i));
    tokens.push_back({&e->prompt, response(e->rejected)});
    ids.push_back(static_cast<int64_t>(2 * i + 1));
  }
  // Every rank learns of any rank's bad pair here, before the passes' collectives.
  at::Tensor widest =
      at::tensor(std::vector<int64_t>{longest, bad.ok() ? 0 : 1}, at::kLong).contiguous();
  comm_->all_reduce_host(widest, comm::ReduceOp::kMax);
  if (!bad.ok()) return bad;
  if (widest[1].item<int64_t>() != 0) {
    return absl::InvalidArgumentError("another rank's preference pairs are invalid");
  }
  FLYWHEEL_ASSIGN_OR_RETURN(
      BalancedMicroBatches packed,
      pack_balanced(tokens, ids, options_.optimizer.pack_options(widest[0].item<int64_t>()),
                    *comm_));
  at::Tensor sums = at::zeros({static_cast<int64_t>(2 * examples.size())}, at::kDouble);
  std::unique_ptr<at::NoGradGuard> no_grad;
  if (weights == nullptr) no_grad = std::make_unique<at::NoGradGuard>();
  for (const MicroBatch& mb : packed.micro_batches) {
    TokenOutputs out = model_->forward(mb.batch);
    if (mb.sequences.empty()) {  // a padding micro-batch: it only keeps the collectives in step
      // Zero gradient: the padding token trains nothing.
      if (weights != nullptr) ((reward_model ? out.values : out.logprobs).sum() * 0).backward();
      continue;
    }
    const at::Tensor rows = packed.rows_of(mb);
    // Per response (rows in micro-batch order); unpack() zeroed the positions past each one.
    at::Tensor per_response;
    if (reward_model) {
      const at::Tensor last =
          at::tensor(lengths, at::kLong).index({rows}).to(out.values.device()).unsqueeze(1);
      per_response = unpack(mb, out.values).gather(1, last).squeeze(1);
    } else {
      per_response = unpack(mb, out.logprobs).sum(1);
    }
    sums.index_put_({rows}, per_response.detach().to(at::kCPU, at::kDouble));
    if (weights != nullptr) {
      const at::Tensor w =
          weights->index({rows}).to(per_response.device(), per_response.scalar_type());
      (per_response * w).sum().backward();
    }
  }
  return sums;
}

absl::StatusOr<algos::PreferenceLossResult> DpoTrainer::loss(
    const std::vector<const PreferenceExample*>& examples, const at::Tensor& logps,
    double* loss_mean_part, at::Tensor* gradient) {
  const bool reference = options_.loss.uses_reference();
  std::vector<double> ref_chosen, ref_rejected;
  absl::Status bad;
  for (size_t i = 0; i < examples.size(); ++i) {
    const PreferenceExample* e = examples[i];
    if (reference && bad.ok() &&
        (!std::isfinite(e->ref_chosen) || !std::isfinite(e->ref_rejected))) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "preference pair ", i, " has no reference log-probs (set_reference() first)"));
    }
    ref_chosen.push_back(e->ref_chosen);
    ref_rejected.push_back(e->ref_rejected);
  }
  // The count of every rank's pairs, and whether any rank lacks a reference: all fail together.
  at::Tensor pairs_total =
      at::tensor(std::vector<double>{static_cast<double>(examples.size()), bad.ok() ? 0.0 : 1.0},
                 at::kDouble)
          .contiguous();
  comm_->all_reduce_host(pairs_total, comm::ReduceOp::kSum);
  if (!bad.ok()) return bad;
  if (pairs_total[1].item<double>() != 0) {
    return absl::InvalidArgumentError(
        "another rank's preference pairs have no reference log-probs");
  }
  const double total = std::max(1.0, pairs_total[0].item<double>());

  const int64_t P = static_cast<int64_t>(examples.size());
  const at::Tensor by_pair = logps.view({P, 2});
  const at::Tensor lengths = response_lengths(examples).view({P, 2});
  algos::PreferencePairs pairs;
  pairs.chosen_logps = by_pair.select(1, 0).clone().requires_grad_(gradient != nullptr);
  pairs.rejected_logps = by_pair.select(1, 1).clone().requires_grad_(gradient != nullptr);
  pairs.chosen_tokens = lengths.select(1, 0);
  pairs.rejected_tokens = lengths.select(1, 1);
  if (options_.reward_model) {
    std::vector<double> margins;
    for (const PreferenceExample* e : examples) margins.push_back(e->margin);
    pairs.margins = at::tensor(margins, at::kDouble).view({P});
  }
  if (reference) {
    pairs.chosen_ref = at::tensor(ref_chosen, at::kDouble).view({P});
    pairs.rejected_ref = at::tensor(ref_rejected, at::kDouble).view({P});
  }
  FLYWHEEL_ASSIGN_OR_RETURN(algos::PreferenceLossResult result,
                            algos::preference_loss(options_.loss, pairs));
  const at::Tensor mean_part = result.losses.sum() / total;
  *loss_mean_part = mean_part.item<double>();
  if (gradient != nullptr) {
    if (P > 0) mean_part.backward();
    *gradient =
        P > 0 ? at::stack({pairs.chosen_logps.grad(), pairs.rejected_logps.grad()}, 1).view({2 * P})
              : at::zeros({0}, at::kDouble);
  }
  return result;
}

std::map<std::string, double> DpoTrainer::metrics(const algos::PreferenceLossResult& result,
                                                  const at::Tensor& logps, double loss) {
  const int64_t P = result.losses.numel();
  at::Tensor sums = at::zeros({7}, at::kDouble);
  if (P > 0) {
    const at::Tensor by_pair = logps.view({P, 2});
    // A pair whose rewards differ by float noise only (at the start the policy is the
    // reference) counts as half right, not as wrong: accuracy starts near 50%.
    const at::Tensor margin = result.chosen_rewards - result.rejected_rewards;
    const double tie = kTieNats * (options_.reward_model ? 1.0 : options_.loss.beta);
    const at::Tensor right =
        (margin > tie).to(at::kDouble) + 0.5 * (margin.abs() <= tie).to(at::kDouble);
    sums = at::stack({result.chosen_rewards.sum(), result.rejected_rewards.sum(), right.sum(),
                      by_pair.select(1, 0).sum(), by_pair.select(1, 1).sum(),
                      at::scalar_tensor(static_cast<double>(P), at::kDouble),
                      at::scalar_tensor(loss, at::kDouble)})
               .to(at::kDouble)
               .contiguous();
  } else {
    sums[6] = loss;
  }
  comm_->all_reduce_host(sums, comm::ReduceOp::kSum);
  const double n = std::max(1.0, sums[5].item<double>());
  const double chosen = sums[0].item<double>() / n, rejected = sums[1].item<double>() / n;
  std::map<std::string, double> m = {{"rewards/chosen", chosen},
                                     {"rewards/rejected", rejected},
                                     {"rewards/margins", chosen - rejected},
                                     {"rewards/accuracies", sums[2].item<double>() / n},
                                     {prefix_ + "pairs", sums[5].item<double>()},
                                     {prefix_ + "loss", sums[6].item<double>()}};
  if (!options_.reward_model) {  // a reward model's "log-probs" are its rewards
    m["logps/chosen"] = sums[3].item<double>() / n;
    m["logps/rejected"] = sums[4].item<double>() / n;
  }
  return m;
}

absl::Status DpoTrainer::set_reference(const std::vector<PreferenceExample*>& examples) {
  std::vector<const PreferenceExample*> view(examples.begin(), examples.end());
  FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor logps, response_logps(view, nullptr));
  for (size_t i = 0; i < examples.size(); ++i) {
    examples[i]->ref_chosen = logps[2 * i].item<double>();
    examples[i]->ref_rejected = logps[2 * i + 1].item<double>();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> DpoTrainer::step(
    const std::vector<const PreferenceExample*>& examples) {
  FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor logps, response_logps(examples, nullptr));
  double loss_part = 0;
  at::Tensor gradient;
  FLYWHEEL_ASSIGN_OR_RETURN(algos::PreferenceLossResult result,
                            loss(examples, logps, &loss_part, &gradient));
  FLYWHEEL_RETURN_IF_ERROR(response_logps(examples, &gradient).status());
  const double lr = schedule_->at(counters_.steps);
  const ShardedAdamW::Update u =
      optimizer_->finish_update(loss_part, lr, options_.optimizer.grad_clip);
  FLYWHEEL_RETURN_IF_ERROR(
      counters_.count(u, options_.optimizer.max_consecutive_skips, "preference"));
  std::map<std::string, double> m = metrics(result, logps, loss_part);
  m[prefix_ + "grad_norm"] = u.grad_norm;
  m[prefix_ + "lr"] = lr;
  m[prefix_ + "skipped"] = u.applied ? 0.0 : 1.0;
  return m;
}

absl::StatusOr<std::map<std::string, double>> DpoTrainer::evaluate(
    const std::vector<const PreferenceExample*>& examples) {
  FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor logps, response_logps(examples, nullptr));
  double loss_part = 0;
  FLYWHEEL_ASSIGN_OR_RETURN(algos::PreferenceLossResult result,
                            loss(examples, logps, &loss_part, nullptr));
  return metrics(result, logps, loss_part);
}

TrainingState DpoTrainer::training_state() {
  return policy_training_state(*model_, *optimizer_, counters_,
                               options_.reward_model ? "critic" : "policy");
}

void DpoTrainer::restore(const std::map<std::string, double>& scalars) {
  counters_.restore(scalars);
}

}  // namespace flywheel::trainer
