// `algorithm:` — preset, advantage estimator, policy loss, KL and IS correction.
// An empty component name means "the preset's choice" (see docs/algorithms.md once presets land).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct AlgorithmOptions {
  std::string name = "grpo";           // ppo | grpo | dapo | dr_grpo | gspo | rloo | reinforce_pp
  std::string advantage_estimator;     // "" = preset
  std::string policy_loss;             // "" = preset
  std::string loss_agg_mode;           // "" = preset
  std::string is_correction = "none";  // none | tis | seq_tis | icepop | seq_mask (or a plugin)
  double clip_low = 0.2;               // PPO ratio lower clip: 1 - clip_low
  double clip_high = 0.2;              // PPO ratio upper clip: 1 + clip_high (clip-higher)
  double clip_c = 3.0;                 // dual-clip constant for negative advantages; 0 = off
  std::string kl_estimator = "k3";     // k1 | k2 | k3 | abs
  double kl_coef = 0.0;                // 0 = no KL term
  bool kl_in_reward = false;           // KL as a reward penalty instead of a loss term
  double entropy_coef = 0.0;
  double gamma = 1.0;  // discount (GAE, REINFORCE++)
  double lam = 1.0;    // GAE lambda

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, AlgorithmOptions& o);

}  // namespace flywheel::core
