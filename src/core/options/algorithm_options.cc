#include "flywheel/core/options/algorithm_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, AlgorithmOptions& o) {
  b.field("name", &o.name,
          FieldInfo("Algorithm preset; it chooses the components left empty below.")
              .one_of({"ppo", "grpo", "dapo", "dr_grpo", "gspo", "rloo", "reinforce_pp"}));
  b.field("advantage_estimator", &o.advantage_estimator,
          FieldInfo("Advantage estimator registry name (gae, grpo, dr_grpo, rloo, "
                    "reinforce_pp, ... or a plugin's). Empty: the preset's."));
  b.field("policy_loss", &o.policy_loss,
          FieldInfo("Policy loss registry name (ppo_clip, gspo, reinforce, ... or a plugin's). "
                    "Empty: the preset's."));
  b.field("loss_agg_mode", &o.loss_agg_mode,
          FieldInfo("Loss aggregation (token-mean, seq-mean-token-mean, ...). Empty: the "
                    "preset's."));
  b.field("is_correction", &o.is_correction,
          FieldInfo("Rollout/trainer mismatch correction: none, tis, seq_tis, icepop, seq_mask "
                    "or a plugin's."));
  b.field("clip_low", &o.clip_low,
          FieldInfo("PPO ratio lower bound is 1 - clip_low.").min(0).max(1));
  b.field("clip_high", &o.clip_high, FieldInfo("PPO ratio upper bound is 1 + clip_high.").min(0));
  b.field("clip_c", &o.clip_c,
          FieldInfo("Dual-clip constant for negative advantages (> 1); 0 = off.").min(0));
  b.field("kl_estimator", &o.kl_estimator,
          FieldInfo("KL estimator against the reference model.").one_of({"k1", "k2", "k3", "abs"}));
  b.field("kl_coef", &o.kl_coef,
          FieldInfo("KL coefficient; 0 = no reference model needed.").min(0));
  b.field("kl_in_reward", &o.kl_in_reward,
          FieldInfo("Apply KL as a per-token reward penalty instead of a loss term."));
  b.field("entropy_coef", &o.entropy_coef, FieldInfo("Entropy bonus coefficient.").min(0));
  b.field("gamma", &o.gamma, FieldInfo("Discount factor (GAE, REINFORCE++).").min(0).max(1));
  b.field("lam", &o.lam, FieldInfo("GAE lambda.").min(0).max(1));
}

absl::Status AlgorithmOptions::validate() const {
  if (clip_c != 0.0 && clip_c <= 1.0) {
    return absl::InvalidArgumentError("clip_c: must be > 1 (or 0 to turn dual clip off)");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
