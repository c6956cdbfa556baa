#include "flywheel/trainer/sharded_adamw.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/trainer/adamw_rows.h"

namespace flywheel::trainer {
namespace {

// Whether one AdamW update runs in adamw_update_rows: contiguous float32 CPU tensors of one size.
bool in_one_pass(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v,
                 const at::Tensor& mask) {
  for (const at::Tensor* t : {&p, &g, &m, &v, &mask}) {
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || !t->is_contiguous() ||
        t->numel() != p.numel()) {
      return false;
    }
  }
  return true;
}

}  // namespace

ShardedAdamW::ShardedAdamW(std::vector<FlatUnit*> units, comm::Communicator* comm,
                           const AdamWOptions& options)
    : units_(std::move(units)), comm_(comm), options_(options) {
  for (FlatUnit* unit : units_) {
    exp_avg_.push_back(at::zeros_like(unit->shard().detach()));
    exp_avg_sq_.push_back(at::zeros_like(unit->shard().detach()));
  }
}

std::unique_ptr<ShardedAdamW> ShardedAdamW::for_model(ShardedDecoder& model,
                                                      const AdamWOptions& options) {
  // With LoRA: the adapters only.
  return std::make_unique<ShardedAdamW>(model.trainable_units(), &model.comm(), options);
}

double ShardedAdamW::grad_norm() {
  at::Tensor sum =
      at::zeros({1}, at::TensorOptions()
                         .dtype(at::kDouble)
                         .device(units_.empty() ? at::kCPU : units_[0]->shard().device()));
  for (FlatUnit* unit : units_) {
    const at::Tensor& g = unit->shard().grad();
    if (g.defined()) sum += at::norm(g).to(at::kDouble).pow(2);  // no temporary of g's size
  }
  comm_->all_reduce(sum, comm::ReduceOp::kSum);
  return std::sqrt(sum.item<double>());
}

double ShardedAdamW::clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void ShardedAdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1 - std::pow(b1, static_cast<double>(steps_));
  const double bias2 = 1 - std::pow(b2, static_cast<double>(steps_));
  AdamWCoefficients c;
  c.lr = lr;
  c.grad_scale = grad_scale;
  c.weight_decay = options_.weight_decay;
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = options_.eps;
  c.bias1 = bias1;
  c.bias2 = bias2;
  for (size_t i = 0; i < units_.size(); ++i) {
    at::Tensor p = units_[i]->shard().detach();
    at::Tensor g = units_[i]->shard().grad();
    if (!g.defined()) g = at::zeros_like(p);
    if (in_one_pass(p, g, exp_avg_[i], exp_avg_sq_[i], units_[i]->decay_mask())) {
      AdamWRows rows;
      rows.param = p.data_ptr<float>();
      rows.grad = g.data_ptr<float>();
      rows.exp_avg = exp_avg_[i].data_ptr<float>();
      rows.exp_avg_sq = exp_avg_sq_[i].data_ptr<float>();
      rows.decay_mask = units_[i]->decay_mask().data_ptr<float>();
      rows.n = p.numel();
      adamw_update_rows(rows, c);
      continue;
    }
    if (grad_scale != 1.0) g.mul_(grad_scale);  // the gradient is zeroed after the step
    if (options_.weight_decay != 0)
      p.mul_(1 - lr * options_.weight_decay * units_[i]->decay_mask());
    exp_avg_[i].mul_(b1).add_(g, 1 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1 - b2);
    at::Tensor denom = exp_avg_sq_[i].sqrt();  // the one temporary of the update
    denom.div_(std::sqrt(bias2)).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

ShardedAdamW::Update ShardedAdamW::finish_update(double local_loss, double lr,
                                                 double max_grad_norm) {
  RECORD_USER_SCOPE("flywheel::optimizer");  // profilers' phase (learner_bench --profile)
  Update update;
  at::Tensor total = at::full({1}, local_loss, at::kDouble);
  comm_->all_reduce_host(total, comm::ReduceOp::kSum);
  update.loss = total.item<double>();
  update.grad_norm = grad_norm();
  update.applied = std::isfinite(update.loss) && std::isfinite(update.grad_norm);
  if (update.applied) step(lr, clip_coefficient(update.grad_norm, max_grad_norm));
  zero_grad();
  return update;
}

void ShardedAdamW::zero_grad() {
  for (FlatUnit* unit : units_) {
    if (unit->shard().grad().defined()) unit->shard().mutable_grad().zero_();
  }
}

std::map<std::string, at::Tensor> ShardedAdamW::state() const {
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < units_.size(); ++i) {
    out[units_[i]->name() + ".exp_avg"] = exp_avg_[i];
    out[units_[i]->name() + ".exp_avg_sq"] = exp_avg_sq_[i];
  }
  return out;
}

absl::Status ShardedAdamW::load_state(const std::map<std::string, at::Tensor>& state,
                                      int64_t steps) {
  for (size_t i = 0; i < units_.size(); ++i) {
    for (auto [suffix, target] :
         {std::pair{".exp_avg", &exp_avg_[i]}, std::pair{".exp_avg_sq", &exp_avg_sq_[i]}}) {
      const std::string name = units_[i]->name() + suffix;
      auto it = state.find(name);
      if (it == state.end()) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state lacks '", name, "'"));
      }
      if (it->second.sizes() != target->sizes()) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state '", name, "' has ",
                                                       it->second.numel(), " elements, needs ",
                                                       target->numel()));
      }
      target->copy_(it->second);
    }
  }
  steps_ = steps;
  return absl::OkStatus();
}

std::string memory_summary(const ShardedDecoder& model, const ShardedAdamW& optimizer) {
  int64_t trainable = 0;
  for (const FlatUnit* unit : model.trainable_units()) trainable += unit->numel();
  return absl::StrFormat(
      "memory per rank: %.2f MiB of parameter shards and gradients, %.2f MiB of optimizer state; "
      "%d trainable parameters%s",
      model.local_bytes() / double(1 << 20), optimizer.local_bytes() / double(1 << 20), trainable,
      model.has_adapters() ? " (LoRA adapters; the base is frozen)" : "");
}

int64_t ShardedAdamW::local_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    bytes += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * 4;
  }
  return bytes;
}

}  // namespace flywheel::trainer
