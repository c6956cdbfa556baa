// `algorithm:` — preset, advantage estimator, policy loss, KL and IS correction.
// An empty component name means "the preset's choice" (see docs/algorithms.md once presets land).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// algorithm.kl_controller.
enum class KlController { kFixed, kAdaptive };
absl::Span<const ChoiceName<KlController>> choice_names(KlController);

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
  double gamma = 1.0;             // discount (GAE, REINFORCE++)
  double lam = 1.0;               // GAE lambda
  bool norm_by_std = true;        // GRPO: divide by the group std
  double grpo_eps = 1e-6;         // added to the group std
  bool whiten_advantages = true;  // GAE: whiten over the batch's valid tokens
  double loss_agg_constant = 0;   // C of seq-mean-token-sum-norm; 0 = max_new_tokens
  KlController kl_controller = KlController::kFixed;  // KL in the reward
  double kl_target = 0.1;                             // adaptive controller target
  double kl_horizon = 10000;                          // adaptive controller horizon
  double is_low = -1;               // lower IS bound; -1 = the correction's default
  double is_high = -1;              // IS cap / upper bound; -1 = the correction's default
  double value_clip = 0.5;          // critic value clip
  int64_t overlong_buffer_len = 0;  // DAPO soft overlong punishment; 0 = off
  double overlong_penalty_factor = 1.0;
  std::string router_replay = "none";  // none | r3 (mixture-of-experts models)

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, AlgorithmOptions& o);

}  // namespace flywheel::core
