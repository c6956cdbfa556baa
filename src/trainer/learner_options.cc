#include "flywheel/trainer/learner.h"

namespace flywheel::trainer {

LearnerOptions LearnerOptions::from_config(const core::Config& c) {
  const core::TrainerOptions& t = c.trainer;
  const core::AlgorithmOptions& a = c.algorithm;
  LearnerOptions o;
  static_cast<OptimizerOptions&>(o) = OptimizerOptions::from_config(t, c.model.path);
  o.ppo_epochs = t.ppo_epochs;
  o.mini_batches = t.mini_batches;
  o.critic_lr = t.critic_lr;
  o.temperature = c.rollout.temperature > 0 ? c.rollout.temperature : 1.0;
  o.exact_logprobs = t.exact_logprobs;
  o.kl_coef = a.kl_coef;
  o.kl_in_reward = a.kl_in_reward;
  o.adaptive_kl = a.kl_controller == core::KlController::kAdaptive;
  o.kl_target = a.kl_target;
  o.kl_horizon = a.kl_horizon;
  o.entropy_coef = a.entropy_coef;
  o.value_clip = a.value_clip;
  o.critic = a.advantage_estimator == "gae";
  o.overlong_buffer_len = a.overlong_buffer_len;
  o.turn_discount = c.environment.turn_discount;
  o.overlong_penalty_factor = a.overlong_penalty_factor;
  o.max_response_tokens = c.rollout.max_new_tokens;
  o.router_replay = a.router_replay == "r3";
  return o;
}

}  // namespace flywheel::trainer
