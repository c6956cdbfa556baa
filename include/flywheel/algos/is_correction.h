// Rollout/trainer mismatch corrections (ALGORITHMS.md §6): detached per-token weights built
// from the proximal (trainer) and behaviour (rollout engine) log-probs, multiplied into the
// per-token policy loss after clipping; the denominators keep the original mask.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/algos/policy_loss.h"

namespace flywheel::algos {

struct IsInput {
  at::Tensor old_logprobs;      // lp_old: proximal, the trainer's recompute [B, T]
  at::Tensor rollout_logprobs;  // lp_roll: behaviour, from the engine [B, T]
  at::Tensor mask;
};

struct IsResult {
  at::Tensor weights;  // [B, T] detached; 0 at masked positions; undefined for `none`
  Diagnostics diagnostics;
};

struct IsOptions {
  static constexpr double kDefault = -1;  // use the correction's own default
  double low = kDefault;
  double high = kDefault;
};

class IsCorrection {
 public:
  static constexpr char kRegistryKind[] = "is_correction";
  virtual ~IsCorrection() = default;
  virtual absl::StatusOr<IsResult> compute(const IsInput& input) const = 0;
};

// Built-ins, with k = exp(clamp(lp_old - lp_roll, -20, 20)) and K_i its sequence product:
//   none       w = 1 (mismatch diagnostics only)
//   tis        w = min(k, high)                      high default 2.0
//   seq_tis    w = min(K_i, high)                    high default 5.0
//   icepop     w = k * [low <= k <= high]            [0.5, 5.0]
//   seq_mask   w = K_i * [low <= K_i <= high]        [0.0, 3.0] (TRL's sequence_mask)
//   decoupled  w = k * [k <= high]                   5.0 (AReaL's behave_imp_weight_cap)
absl::StatusOr<std::unique_ptr<IsCorrection>> make_is_correction(const std::string& name,
                                                                 const IsOptions& options);

}  // namespace flywheel::algos
