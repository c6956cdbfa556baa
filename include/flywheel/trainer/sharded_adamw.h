// AdamW on FSDP shards (PyTorch's AdamW: decoupled weight decay, bias-corrected moments), with
// float32 state of the shard's size only, and gradient clipping by the global norm.
//
//   double norm = optimizer.grad_norm();          // collective: all ranks, before clipping
//   if (std::isfinite(norm)) optimizer.step(lr, optimizer.clip_coefficient(norm, max_norm));
//   optimizer.zero_grad();
//
// Weight decay applies where the unit's decay_mask() is 1 (not norms, biases, embeddings unless
// configured).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/flat_unit.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class ShardedAdamW {
 public:
  ShardedAdamW(std::vector<FlatUnit*> units, comm::Communicator* comm, const AdamWOptions& options);
  // Over every unit of `model`, on its communicator.
  static std::unique_ptr<ShardedAdamW> for_model(ShardedDecoder& model, const AdamWOptions& o);

  // The L2 norm of the whole model's gradient (all ranks' shards; all-reduced). Collective.
  // Non-finite when any gradient is.
  double grad_norm();
  // PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
  static double clip_coefficient(double norm, double max_norm);
  // Scales the gradients by `grad_scale`, then one AdamW update of every shard with `lr`.
  void step(double lr, double grad_scale = 1.0);
  void zero_grad();

  // Ends one update whose backward passes accumulated the gradients: the loss (this rank's part,
  // summed over ranks) and the global gradient norm are computed, the step is taken with
  // clipping unless either is not finite, and the gradients are zeroed. Collective.
  struct Update {
    bool applied = false;
    double loss = 0;       // over all ranks
    double grad_norm = 0;  // before clipping
  };
  Update finish_update(double local_loss, double lr, double max_grad_norm);

  int64_t steps() const { return steps_; }
  // State for checkpoints: per unit "exp_avg" and "exp_avg_sq" (this rank's shards), and the
  // step count.
  std::map<std::string, at::Tensor> state() const;
  // InvalidArgument when a tensor is missing or has another shape.
  absl::Status load_state(const std::map<std::string, at::Tensor>& state, int64_t steps);
  // Bytes of optimizer state on this rank.
  int64_t local_bytes() const;

 private:
  std::vector<FlatUnit*> units_;
  comm::Communicator* comm_;
  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

// One line for a run's log: this rank's persistent bytes of `model` (shards and the trainable
// ones' gradients) and of its optimizer's state, and how many parameters train (with LoRA: the
// adapters, the base frozen).
std::string memory_summary(const ShardedDecoder& model, const ShardedAdamW& optimizer);

}  // namespace flywheel::trainer
