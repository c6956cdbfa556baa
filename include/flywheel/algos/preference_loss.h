// Preference losses of the DPO family (docs/algorithms.md, "Preference optimisation"), on the
// summed log-probs of each pair's chosen and rejected responses:
//
//   h   = (pi_c - pi_r) - (ref_c - ref_r)                     the implicit reward margin / beta
//   sigmoid (DPO, Rafailov et al. 2023), with label smoothing eps (conservative DPO):
//         z = beta * h;  loss = -(1 - eps) log sigmoid(z) - eps log sigmoid(-z)
//   ipo   (Azar et al. 2023), on per-token means as TRL computes it:
//         h' = (pi_c / n_c - pi_r / n_r) - (ref_c / n_c - ref_r / n_r);  loss = (h' - 1/(2 beta))^2
//   hinge (SLiC, Zhao et al. 2023):  loss = max(0, 1 - beta * h)
//   simpo (Meng et al. 2024), reference-free and length-normalised:
//         z = beta * (pi_c / n_c - pi_r / n_r) - gamma;  loss = -(1 - eps) log sigmoid(z) - eps log
//         sigmoid(-z)
//   bradley_terry (reward models: Ouyang et al. 2022; TRL's RewardTrainer), on the two scalar
//         rewards r_c, r_r a value head gives (passed as pi_c, pi_r; no reference):
//         loss = -log sigmoid(r_c - r_r - m) + c (r_c + r_r)^2, m the pair's margin, c the
//         centering coefficient
//   rpo_alpha (RPO, Pang et al. 2024), added to any of them: + alpha * (-pi_c / n_c), the chosen
//         response's NLL per token
//
// Rewards: beta * (pi - ref) on the summed log-probs (simpo: beta * pi / n; TRL reports IPO's
// on per-token means instead); accuracy = chosen reward > rejected reward. Every tensor is [P] (one
// entry per pair), float64 on the CPU; the losses carry the gradient of pi_c and pi_r.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::algos {

struct PreferenceLossOptions {
  std::string loss = "sigmoid";   // sigmoid | ipo | hinge | simpo | bradley_terry
  double beta = 0.1;              // > 0
  double label_smoothing = 0;     // eps of sigmoid and simpo, in [0, 0.5)
  double simpo_gamma = 0.5;       // target margin of simpo (TRL: gamma_beta_ratio * beta)
  double rpo_alpha = 0;           // weight of the chosen response's NLL per token; 0 = off
  double center_coefficient = 0;  // bradley_terry: weight of (r_c + r_r)^2

  absl::Status validate() const;
  bool uses_reference() const { return loss != "simpo" && loss != "bradley_terry"; }
};

struct PreferencePairs {
  at::Tensor chosen_logps, rejected_logps;    // policy: sums over each response's tokens
  at::Tensor chosen_ref, rejected_ref;        // the frozen reference's; undefined for simpo
  at::Tensor chosen_tokens, rejected_tokens;  // response lengths (>= 1)
  at::Tensor margins;                         // bradley_terry: [P]; undefined = 0
};

struct PreferenceLossResult {
  at::Tensor losses;                            // [P]
  at::Tensor chosen_rewards, rejected_rewards;  // [P], detached
};

// InvalidArgument for bad options, shapes that differ, or a missing reference.
absl::StatusOr<PreferenceLossResult> preference_loss(const PreferenceLossOptions& options,
                                                     const PreferencePairs& pairs);

}  // namespace flywheel::algos
