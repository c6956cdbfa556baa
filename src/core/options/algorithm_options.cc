#include "flywheel/core/options/algorithm_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<KlController>> choice_names(KlController) {
  static constexpr ChoiceName<KlController> kNames[] = {{KlController::kFixed, "fixed"},
                                                        {KlController::kAdaptive, "adaptive"}};
  return kNames;
}

void bind_options(FieldBinder& b, AlgorithmOptions& o) {
  b.field("name", &o.name,
          FieldInfo("Algorithm preset: it sets every key of this section that the config does "
                    "not set (see docs/algorithms.md); the defaults shown are the grpo preset's.")
              .one_of({"ppo", "grpo", "dapo", "dr_grpo", "gspo", "rloo", "reinforce_pp", "remax"}));
  b.field("advantage_estimator", &o.advantage_estimator,
          FieldInfo("Advantage estimator registry name (gae, grpo, dr_grpo, rloo, "
                    "reinforce_pp, reinforce_pp_baseline, remax, grpo_process, ... or a "
                    "plugin's). Empty: the preset's."));
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
          FieldInfo(
              "KL estimator against the reference model (k1+ / k3+: straight-through k2 gradient).")
              .one_of({"k1", "k2", "k3", "abs", "k1+", "k3+"}));
  b.field("kl_coef", &o.kl_coef,
          FieldInfo("KL coefficient; 0 = no reference model needed.").min(0));
  b.field("kl_in_reward", &o.kl_in_reward,
          FieldInfo("Apply KL as a per-token reward penalty instead of a loss term."));
  b.field("entropy_coef", &o.entropy_coef, FieldInfo("Entropy bonus coefficient.").min(0));
  b.field("gamma", &o.gamma,
          FieldInfo("Discount factor (GAE, REINFORCE++, grpo_process).").min(0).max(1));
  b.field("lam", &o.lam, FieldInfo("GAE lambda.").min(0).max(1));
  b.field("norm_by_std", &o.norm_by_std,
          FieldInfo("GRPO, grpo_process: divide advantages by the group's reward std (false = "
                    "Dr. GRPO)."));
  b.field("grpo_eps", &o.grpo_eps, FieldInfo("Added to the group std (GRPO).").greater_than(0));
  b.field("whiten_advantages", &o.whiten_advantages,
          FieldInfo("GAE: whiten advantages over the batch's valid tokens."));
  b.field("loss_agg_constant", &o.loss_agg_constant,
          FieldInfo("C of seq-mean-token-sum-norm; 0 = rollout.max_new_tokens.").min(0));
  b.choice("kl_controller", &o.kl_controller,
           FieldInfo("KL-in-reward coefficient: fixed, or adaptive (verl's controller)."));
  b.field("kl_target", &o.kl_target, FieldInfo("Adaptive KL target.").greater_than(0));
  b.field("kl_horizon", &o.kl_horizon, FieldInfo("Adaptive KL horizon.").greater_than(0));
  b.field(
      "is_low", &o.is_low,
      FieldInfo("Lower bound of the IS correction (icepop, seq_mask); -1 = its default.").min(-1));
  b.field("is_high", &o.is_high,
          FieldInfo("Cap / upper bound of the IS correction; -1 = its default (tis 2, seq_tis 5, "
                    "icepop 5, seq_mask 3, decoupled 5).")
              .min(-1));
  b.field("value_clip", &o.value_clip, FieldInfo("Critic value clip range.").min(0));
  b.field("overlong_buffer_len", &o.overlong_buffer_len,
          FieldInfo("DAPO soft overlong punishment over the last N tokens before "
                    "rollout.max_new_tokens; 0 = off.")
              .min(0));
  b.field("overlong_penalty_factor", &o.overlong_penalty_factor,
          FieldInfo("Penalty at the maximum length (DAPO).").min(0));
  b.field("router_replay", &o.router_replay,
          FieldInfo("Mixture-of-experts models: r3 (rollout routing replay) makes the learner's "
                    "policy forward use the experts the rollout engine routed each token to "
                    "(the router still learns through their weights); none routes anew. Either "
                    "way rollout_corr/router_disagreement reports how often the learner's own "
                    "choice differs (docs/models.md).")
              .one_of({"none", "r3"}));
}

absl::Status AlgorithmOptions::validate() const {
  if (is_low >= 0 && is_high >= 0 && is_low > is_high) {
    return absl::InvalidArgumentError("is_low: must be <= is_high");
  }
  if (clip_c != 0.0 && clip_c <= 1.0) {
    return absl::InvalidArgumentError("clip_c: must be > 1 (or 0 to turn dual clip off)");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
