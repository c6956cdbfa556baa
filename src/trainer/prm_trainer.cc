#include "flywheel/trainer/prm_trainer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/micro_batch.h"

namespace flywheel::trainer {
namespace {

// Indices of the sums pass() returns.
enum Sum { kLoss, kRight, kSteps, kOutcomeRight, kCompletions, kPositive, kSums };

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessRewardTrainer>> ProcessRewardTrainer::create(
    const OptimizerOptions& options, const model::ModelConfig& config, comm::Communicator* comm) {
  if (options.micro_batch_tokens < 1) {
    return absl::InvalidArgumentError("micro_batch_tokens must be >= 1");
  }
  FLYWHEEL_RETURN_IF_ERROR(refuse_load_balancing(config, "process reward model training"));
  std::unique_ptr<ProcessRewardTrainer> prm(new ProcessRewardTrainer(options, comm));
  ShardingOptions sharding = options.sharding;
  sharding.value_head = true;
  FLYWHEEL_ASSIGN_OR_RETURN(prm->model_, ShardedDecoder::create(config, comm, sharding));
  prm->optimizer_ = ShardedAdamW::for_model(*prm->model_, options.adamw);
  FLYWHEEL_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr));
  prm->schedule_ = schedule;
  return prm;
}

absl::StatusOr<at::Tensor> ProcessRewardTrainer::pass(
    const std::vector<const StepExample*>& examples, bool train) {
  // The head's output at a step's last token needs that token as an input: one (unread) token
  // follows the steps, and column j of a sequence reads its step token j - 1.
  std::vector<std::vector<int32_t>> extended;
  extended.reserve(examples.size());
  std::vector<SequenceTokens> tokens;
  std::vector<int64_t> ids;
  int64_t longest = 1, labelled = 0;
  absl::Status bad;
  for (size_t i = 0; i < examples.size(); ++i) {
    const StepExample* e = examples[i];
    if (e->prompt.empty() || e->steps.empty() || e->label_at.empty() ||
        e->label_at.size() != e->labels.size() ||
        *std::max_element(e->label_at.begin(), e->label_at.end()) >=
            static_cast<int32_t>(e->steps.size())) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "step example ", i, ": needs a prompt, steps and one label within them per step"));
      break;
    }
    extended.push_back(e->steps);
    extended.back().push_back(0);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(extended.back().size()));
    labelled += static_cast<int64_t>(e->labels.size());
    tokens.push_back({&e->prompt, &extended.back()});
    ids.push_back(static_cast<int64_t>(i));
  }
  // Every rank learns of any rank's bad example, and of the steps the mean is over.
  at::Tensor shared = at::tensor(std::vector<int64_t>{longest, bad.ok() ? 0 : 1}, at::kLong);
  comm_->all_reduce_host(shared, comm::ReduceOp::kMax);
  if (!bad.ok()) return bad;
  if (shared[1].item<int64_t>() != 0) {
    return absl::InvalidArgumentError("another rank's step examples are invalid");
  }
  at::Tensor total = at::tensor(std::vector<double>{static_cast<double>(labelled)}, at::kDouble);
  comm_->all_reduce_host(total, comm::ReduceOp::kSum);
  const double all_steps = std::max(1.0, total[0].item<double>());
  FLYWHEEL_ASSIGN_OR_RETURN(
      BalancedMicroBatches packed,
      pack_balanced(tokens, ids, options_.pack_options(shared[0].item<int64_t>()), *comm_));
  at::Tensor sums = at::zeros({kSums}, at::kDouble);
  std::unique_ptr<at::NoGradGuard> no_grad;
  if (!train) no_grad = std::make_unique<at::NoGradGuard>();
  for (const MicroBatch& mb : packed.micro_batches) {
    TokenOutputs out = model_->forward(mb.batch);
    if (mb.sequences.empty()) {  // a padding micro-batch keeps the collectives in step
      if (train) (out.values.sum() * 0).backward();
      continue;
    }
    const at::Tensor values = unpack(mb, out.values);  // [S, max_response]
    const at::Tensor rows_tensor = packed.rows_of(mb).contiguous();
    const int64_t S = rows_tensor.size(0);
    const int64_t* rows = rows_tensor.data_ptr<int64_t>();
    // Each sequence's label columns, padded with column 0 and weight 0.
    int64_t widest = 1;
    for (int64_t s = 0; s < S; ++s) {
      widest = std::max<int64_t>(widest, examples[rows[s]]->labels.size());
    }
    std::vector<int64_t> columns(S * widest, 0);
    std::vector<float> labels(S * widest, 0), weights(S * widest, 0);
    for (int64_t s = 0; s < S; ++s) {
      const StepExample* e = examples[rows[s]];
      for (size_t k = 0; k < e->labels.size(); ++k) {
        columns[s * widest + k] = e->label_at[k] + 1;
        labels[s * widest + k] = e->labels[k];
        weights[s * widest + k] = 1;
      }
    }
    const at::Device device = values.device();
    const at::Tensor logits =
        values.gather(1, at::tensor(columns, at::kLong).view({S, widest}).to(device))
            .to(at::kFloat);
    const at::Tensor y = at::tensor(labels, at::kFloat).view({S, widest}).to(device);
    const at::Tensor w = at::tensor(weights, at::kFloat).view({S, widest}).to(device);
    // Binary cross-entropy with logits, stable: max(x, 0) - x y + log(1 + exp(-|x|)).
    const at::Tensor losses =
        (at::clamp_min(logits, 0) - logits * y + at::log1p(at::exp(-logits.abs()))) * w;
    if (train) (losses.sum() / all_steps).backward();
    const at::Tensor right = ((logits > 0).to(at::kFloat) == y).to(at::kFloat) * w;
    // A completion is judged right when every step is: its steps' right count equals its count.
    const at::Tensor outcome = (right.sum(1) == w.sum(1)).to(at::kFloat);
    sums += at::stack({losses.sum().to(at::kDouble), right.sum().to(at::kDouble),
                       w.sum().to(at::kDouble), outcome.sum().to(at::kDouble),
                       at::scalar_tensor(static_cast<double>(S), at::kDouble),
                       (y * w).sum().to(at::kDouble)})
                .detach()
                .to(at::kCPU);
  }
  sums = sums.contiguous();
  comm_->all_reduce_host(sums, comm::ReduceOp::kSum);
  return sums;
}

std::map<std::string, double> ProcessRewardTrainer::metrics(const at::Tensor& sums) const {
  const double steps = std::max(1.0, sums[kSteps].item<double>());
  const double completions = std::max(1.0, sums[kCompletions].item<double>());
  return {{"prm/loss", sums[kLoss].item<double>() / steps},
          {"prm/accuracy", sums[kRight].item<double>() / steps},
          {"prm/outcome_accuracy", sums[kOutcomeRight].item<double>() / completions},
          {"prm/steps", sums[kSteps].item<double>()},
          {"prm/completions", sums[kCompletions].item<double>()},
          {"prm/positive", sums[kPositive].item<double>() / steps}};
}

absl::StatusOr<std::map<std::string, double>> ProcessRewardTrainer::step(
    const std::vector<const StepExample*>& examples) {
  FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor sums, pass(examples, /*train=*/true));
  std::map<std::string, double> m = metrics(sums);
  const double lr = schedule_->at(counters_.steps);
  // finish_update sums its loss over the ranks: each passes its share of the (global) mean.
  const ShardedAdamW::Update u =
      optimizer_->finish_update(m.at("prm/loss") / comm_->size(), lr, options_.grad_clip);
  FLYWHEEL_RETURN_IF_ERROR(
      counters_.count(u, options_.max_consecutive_skips, "process reward model"));
  m["prm/grad_norm"] = u.grad_norm;
  m["prm/lr"] = lr;
  m["prm/skipped"] = u.applied ? 0.0 : 1.0;
  return m;
}

absl::StatusOr<std::map<std::string, double>> ProcessRewardTrainer::evaluate(
    const std::vector<const StepExample*>& examples) {
  FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor sums, pass(examples, /*train=*/false));
  return metrics(sums);
}

TrainingState ProcessRewardTrainer::training_state() {
  return policy_training_state(*model_, *optimizer_, counters_, "prm");
}

void ProcessRewardTrainer::restore(const std::map<std::string, double>& scalars) {
  counters_.restore(scalars);
}

}  // namespace flywheel::trainer
