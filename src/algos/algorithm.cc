#include "flywheel/algos/algorithm.h"

#include "absl/strings/str_cat.h"
#include "flywheel/algos/dapo.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::algos {
namespace {

absl::Status keyed(const char* key, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("algorithm.", key, ": ", status.message()));
}

}  // namespace

absl::StatusOr<Algorithm> Algorithm::create(const core::Config& config,
                                            core::PluginRegistry& registry) {
  const core::AlgorithmOptions& a = config.algorithm;
  Algorithm out;
  EstimatorOptions e;
  e.gamma = a.gamma;
  e.lam = a.lam;
  e.eps = a.grpo_eps;
  e.norm_by_std = a.norm_by_std;
  e.whiten = a.whiten_advantages;
  auto estimator =
      registry.get<AdvantageEstimator, const EstimatorOptions&>().create(a.advantage_estimator, e);
  if (!estimator.ok()) return keyed("advantage_estimator", estimator.status());
  out.estimator = std::move(*estimator);
  if (!out.estimator->takes_kl_in_reward() && a.kl_in_reward && a.kl_coef > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "algorithm.kl_in_reward: ", a.advantage_estimator,
        " reads rewards only where steps end and would drop a per-token KL penalty; set "
        "algorithm.kl_in_reward: false (the KL then goes in the loss)"));
  }

  PolicyLossOptions p;
  p.clip_low = a.clip_low;
  p.clip_high = a.clip_high;
  p.clip_c = a.clip_c;
  auto loss = registry.get<PolicyLoss, const PolicyLossOptions&>().create(a.policy_loss, p);
  if (!loss.ok()) return keyed("policy_loss", loss.status());
  out.policy_loss = std::move(*loss);

  IsOptions is;
  is.low = a.is_low;
  is.high = a.is_high;
  auto correction = registry.get<IsCorrection, const IsOptions&>().create(a.is_correction, is);
  if (!correction.ok()) return keyed("is_correction", correction.status());
  out.is_correction = std::move(*correction);

  absl::StatusOr<AggMode> agg = parse_agg_mode(a.loss_agg_mode);
  if (!agg.ok()) return keyed("loss_agg_mode", agg.status());
  out.agg = *agg;
  out.norm_constant = a.loss_agg_constant > 0 ? a.loss_agg_constant
                                              : static_cast<double>(config.rollout.max_new_tokens);
  absl::StatusOr<KlEstimator> kl = parse_kl_estimator(a.kl_estimator);
  if (!kl.ok()) return keyed("kl_estimator", kl.status());
  out.kl_estimator = *kl;
  return out;
}

absl::StatusOr<bool> needs_greedy_baseline(const core::Config& config,
                                           core::PluginRegistry& registry) {
  auto estimator = registry.get<AdvantageEstimator, const EstimatorOptions&>().create(
      config.algorithm.advantage_estimator, EstimatorOptions());
  if (!estimator.ok()) return keyed("advantage_estimator", estimator.status());
  return (*estimator)->needs_greedy_baseline();
}

absl::Status register_algos_builtins(core::PluginRegistry& registry) {
  auto& estimators = registry.get<AdvantageEstimator, const EstimatorOptions&>();
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("gae", &make_gae));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("grpo", &make_grpo));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("dr_grpo", &make_dr_grpo));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("rloo", &make_rloo));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("reinforce_pp", &make_reinforce_pp));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("reinforce_pp_baseline", &make_reinforce_pp_baseline));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("remax", &make_remax));
  FLYWHEEL_RETURN_IF_ERROR(estimators.add("grpo_process", &make_grpo_process));
  auto& losses = registry.get<PolicyLoss, const PolicyLossOptions&>();
  FLYWHEEL_RETURN_IF_ERROR(losses.add("ppo_clip", &make_ppo_clip));
  FLYWHEEL_RETURN_IF_ERROR(losses.add("gspo", &make_gspo));
  FLYWHEEL_RETURN_IF_ERROR(losses.add("reinforce", &make_reinforce));
  auto& corrections = registry.get<IsCorrection, const IsOptions&>();
  for (const char* name : {"none", "tis", "seq_tis", "icepop", "seq_mask", "decoupled"}) {
    std::string n = name;
    FLYWHEEL_RETURN_IF_ERROR(
        corrections.add(n, [n](const IsOptions& o) { return make_is_correction(n, o); }));
  }
  auto& filters = registry.get<GroupFilter, const GroupFilterParams&>();
  FLYWHEEL_RETURN_IF_ERROR(filters.add("nonzero_reward_std", &make_nonzero_reward_std));
  return absl::OkStatus();
}

}  // namespace flywheel::algos
