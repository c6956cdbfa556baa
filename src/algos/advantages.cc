#include "flywheel/algos/advantages.h"

#include <cmath>
#include <map>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::algos {
namespace {

absl::Status check_common(const AdvantageInput& in, bool needs_groups) {
  if (!in.mask.defined() || in.mask.dim() != 2) {
    return absl::InvalidArgumentError("advantages need a [B, T] mask");
  }
  const int64_t B = in.mask.size(0);
  if (!in.scores.defined() && !in.token_rewards.defined()) {
    return absl::InvalidArgumentError("advantages need scores or token_rewards");
  }
  if (in.scores.defined() && (in.scores.dim() != 1 || in.scores.size(0) != B)) {
    return absl::InvalidArgumentError("scores must have shape [B]");
  }
  if (in.token_rewards.defined() && in.token_rewards.sizes() != in.mask.sizes()) {
    return absl::InvalidArgumentError("token_rewards must have the mask's shape");
  }
  if (in.token_discounts.defined() && in.token_discounts.sizes() != in.mask.sizes()) {
    return absl::InvalidArgumentError("token_discounts must have the mask's shape");
  }
  if (needs_groups && (!in.group_ids.defined() || in.group_ids.numel() != B)) {
    return absl::InvalidArgumentError("group estimators need group_ids of shape [B]");
  }
  if (in.episode_ids.defined() && in.episode_ids.numel() != B) {
    return absl::InvalidArgumentError("episode_ids must have shape [B]");
  }
  return absl::OkStatus();
}

// One outcome score per row (ALGORITHMS.md §1.2): the row sum of token_rewards when they are
// given (a KL in the reward is part of r_i), else `scores`. A row without a trainable token has
// no position to carry a reward: it keeps its score.
std::vector<double> row_scores(const AdvantageInput& in) {
  at::Tensor s;
  if (in.token_rewards.defined()) {
    at::Tensor valid = in.mask.to(at::kBool);
    s = at::where(valid, in.token_rewards.to(at::kDouble), 0).sum(-1);
    if (in.scores.defined()) s = at::where(valid.any(-1), s, in.scores.to(at::kDouble));
  } else {
    s = in.scores;
  }
  s = s.to(at::kDouble).contiguous();
  return std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
}

std::map<int64_t, std::vector<int64_t>> groups_of(const at::Tensor& ids) {
  at::Tensor g = ids.to(at::kLong).contiguous();
  std::map<int64_t, std::vector<int64_t>> groups;
  for (int64_t i = 0; i < g.numel(); ++i) groups[g.data_ptr<int64_t>()[i]].push_back(i);
  return groups;
}

struct GroupStats {
  double mean = 0, std = 1;  // a singleton has mean 0 and std 1 (verl)
  int64_t size = 0;
};

// Mean and unbiased std of a group's values (one value: mean 0, std 1).
GroupStats stats_of(const std::vector<double>& values) {
  GroupStats s;
  s.size = static_cast<int64_t>(values.size());
  if (values.size() > 1) {
    double sum = 0;
    for (double v : values) sum += v;
    s.mean = sum / values.size();
    double sq = 0;
    for (double v : values) sq += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(sq / (values.size() - 1));
  }
  return s;
}

// Statistics of each row's group over its episodes: one r per episode (that of the episode's
// last row) when episode_ids are given, else one per row.
std::vector<GroupStats> row_group_stats(const std::vector<double>& r, const AdvantageInput& in) {
  std::vector<GroupStats> out(r.size());
  at::Tensor episodes;
  if (in.episode_ids.defined()) episodes = in.episode_ids.to(at::kLong).contiguous();
  for (const auto& [id, rows] : groups_of(in.group_ids)) {
    std::vector<double> values;
    for (size_t k = 0; k < rows.size(); ++k) {
      const bool last_of_episode =
          !episodes.defined() || k + 1 == rows.size() ||
          episodes.data_ptr<int64_t>()[rows[k]] != episodes.data_ptr<int64_t>()[rows[k + 1]];
      if (last_of_episode) values.push_back(r[rows[k]]);
    }
    const GroupStats s = stats_of(values);
    for (int64_t i : rows) out[i] = s;
  }
  return out;
}

// A per-row value broadcast over valid tokens.
at::Tensor broadcast_rows(const std::vector<double>& per_row, const at::Tensor& mask) {
  at::Tensor rows = at::tensor(per_row, at::kDouble).to(at::kFloat).unsqueeze(1);
  return rows * mask.to(at::kFloat);
}

// The discount from each token to the next valid one: gamma, times token_discounts when given.
at::Tensor discounts(const AdvantageInput& in, double gamma) {
  at::Tensor d = at::full(in.mask.sizes(), gamma, at::kFloat);
  return in.token_discounts.defined() ? d * in.token_discounts.to(at::kFloat) : d;
}

// Estimators without a critic: the returns are the advantages.
AdvantageResult returns_are_advantages(at::Tensor a) { return {a, a}; }

// G_t = r_t + d_t G_next over the valid tokens of each row, sweeping back; masked positions are
// skipped (not reset), as in GAE, and hold 0.
at::Tensor discounted_returns(const at::Tensor& r, const at::Tensor& valid, const at::Tensor& d) {
  const int64_t B = valid.size(0), T = valid.size(1);
  at::Tensor next = at::zeros({B});
  at::Tensor g = at::zeros({B, T});
  for (int64_t t = T - 1; t >= 0; --t) {
    at::Tensor mt = valid.select(1, t);
    at::Tensor value = at::where(mt, r.select(1, t), 0) + d.select(1, t) * next;
    next = at::where(mt, value, next);
    g.select(1, t).copy_(at::where(mt, value, 0));
  }
  return g;
}

class Gae : public AdvantageEstimator {
 public:
  explicit Gae(EstimatorOptions o) : o_(o) {}
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, false));
    if (!in.values.defined() || in.values.sizes() != in.mask.sizes()) {
      return absl::InvalidArgumentError("gae needs critic values of the mask's shape");
    }
    at::NoGradGuard no_grad;
    at::Tensor m = in.mask.to(at::kBool);
    at::Tensor r = in.token_rewards.defined() ? in.token_rewards.to(at::kFloat)
                                              : scores_on_last_token(in.scores, in.mask);
    at::Tensor v = in.values.to(at::kFloat);
    const int64_t B = m.size(0), T = m.size(1);
    const at::Tensor d = discounts(in, o_.gamma);
    at::Tensor next_v = at::zeros({B}), next_a = at::zeros({B});
    at::Tensor adv = at::zeros({B, T});
    for (int64_t t = T - 1; t >= 0; --t) {
      at::Tensor mt = m.select(1, t);
      at::Tensor vt = at::where(mt, v.select(1, t), 0);
      at::Tensor dt = d.select(1, t);
      at::Tensor delta = at::where(mt, r.select(1, t), 0) + dt * next_v - vt;
      at::Tensor a = delta + dt * o_.lam * next_a;
      next_v = at::where(mt, vt, next_v);
      next_a = at::where(mt, a, next_a);
      adv.select(1, t).copy_(at::where(mt, a, 0));
    }
    at::Tensor returns = at::where(m, adv + v, 0);
    at::Tensor advantages = o_.whiten ? masked_whiten(adv, in.mask) : adv;
    return AdvantageResult{at::where(m, advantages, 0), returns};
  }

 private:
  EstimatorOptions o_;
};

class Grpo : public AdvantageEstimator {
 public:
  Grpo(EstimatorOptions o, bool norm_by_std) : o_(o), norm_by_std_(norm_by_std) {}
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, true));
    std::vector<double> r = row_scores(in);
    std::vector<GroupStats> stats = row_group_stats(r, in);
    std::vector<double> a(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      a[i] = r[i] - stats[i].mean;
      if (norm_by_std_) a[i] /= stats[i].std + o_.eps;
    }
    return returns_are_advantages(broadcast_rows(a, in.mask));
  }

 private:
  EstimatorOptions o_;
  bool norm_by_std_;
};

class Rloo : public AdvantageEstimator {
 public:
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, true));
    std::vector<double> r = row_scores(in);
    std::vector<GroupStats> stats = row_group_stats(r, in);
    std::vector<double> a(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      const double n = stats[i].size;
      a[i] = n > 1 ? n / (n - 1) * (r[i] - stats[i].mean) : r[i];
    }
    return returns_are_advantages(broadcast_rows(a, in.mask));
  }
};

class ReinforcePp : public AdvantageEstimator {
 public:
  explicit ReinforcePp(EstimatorOptions o) : o_(o) {}
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, false));
    at::NoGradGuard no_grad;
    at::Tensor m = in.mask.to(at::kBool);
    at::Tensor r = in.token_rewards.defined() ? in.token_rewards.to(at::kFloat)
                                              : scores_on_last_token(in.scores, in.mask);
    at::Tensor g = discounted_returns(r, m, discounts(in, o_.gamma));
    return AdvantageResult{at::where(m, masked_whiten(g, in.mask), 0), g};
  }

 private:
  EstimatorOptions o_;
};

class ReinforcePpBaseline : public AdvantageEstimator {
 public:
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, true));
    std::vector<double> r = row_scores(in);
    std::vector<GroupStats> stats = row_group_stats(r, in);
    std::vector<double> centered(r.size());
    for (size_t i = 0; i < r.size(); ++i) centered[i] = r[i] - stats[i].mean;
    at::Tensor s = broadcast_rows(centered, in.mask);
    return returns_are_advantages(at::where(in.mask.to(at::kBool), masked_whiten(s, in.mask), 0));
  }
};

// ReMax (§1.7): undiscounted reward-to-go minus the greedy response's reward; no whitening.
class Remax : public AdvantageEstimator {
 public:
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, false));
    const int64_t B = in.mask.size(0);
    if (!in.baselines.defined() || in.baselines.dim() != 1 || in.baselines.size(0) != B) {
      return absl::InvalidArgumentError(
          "remax needs baselines of shape [B] (the greedy response's reward per row)");
    }
    at::NoGradGuard no_grad;
    at::Tensor m = in.mask.to(at::kFloat);
    at::Tensor r = in.token_rewards.defined() ? in.token_rewards.to(at::kFloat)
                                              : scores_on_last_token(in.scores, in.mask);
    at::Tensor returns = (r * m).flip({-1}).cumsum(-1).flip({-1}) * m;
    at::Tensor advantages = returns - in.baselines.to(at::kFloat).unsqueeze(1) * m;
    return AdvantageResult{advantages, returns};
  }
  bool needs_greedy_baseline() const override { return true; }
};

// GRPO with process supervision (DeepSeekMath §4.1.3): every step reward of a group's rows
// (token_rewards where reward_ends marks a step or turn end, and each row's last valid token) is
// normalised by the mean and std of all of the group's step rewards; a token's advantage is the
// sum of the normalised rewards of the steps that end at or after it (discounted by gamma).
class GrpoProcess : public AdvantageEstimator {
 public:
  explicit GrpoProcess(EstimatorOptions o) : o_(o) {}
  absl::StatusOr<AdvantageResult> compute(const AdvantageInput& in) const override {
    FLYWHEEL_RETURN_IF_ERROR(check_common(in, true));
    if (in.reward_ends.defined() && in.reward_ends.sizes() != in.mask.sizes()) {
      return absl::InvalidArgumentError("reward_ends must have the mask's shape");
    }
    at::NoGradGuard no_grad;
    const at::Tensor m = in.mask.to(at::kBool);
    const int64_t B = m.size(0), T = m.size(1);
    at::Tensor ends = scores_on_last_token(at::ones({B}), in.mask).ne(0);
    if (in.reward_ends.defined()) ends = ends | (in.reward_ends.ne(0) & m);
    ends = ends.contiguous();
    at::Tensor r =
        in.token_rewards.defined() ? in.token_rewards : scores_on_last_token(in.scores, in.mask);
    r = r.to(at::kDouble).contiguous();
    const bool* is_end = ends.data_ptr<bool>();
    const double* reward = r.data_ptr<double>();
    // A row without a trainable token counts with its score, as in grpo's statistics.
    const std::vector<double> outcome = row_scores(in);
    std::vector<double> normalised(B * T, 0.0);
    for (const auto& [id, rows] : groups_of(in.group_ids)) {
      std::vector<double> values;
      for (int64_t b : rows) {
        const size_t before = values.size();
        for (int64_t t = 0; t < T; ++t) {
          if (is_end[b * T + t]) values.push_back(reward[b * T + t]);
        }
        if (values.size() == before) values.push_back(outcome[b]);
      }
      // A singleton group keeps its rewards (mean 0, std 1), as grpo does.
      const GroupStats s = rows.size() > 1 ? stats_of(values) : GroupStats();
      for (int64_t b : rows) {
        for (int64_t t = 0; t < T; ++t) {
          if (!is_end[b * T + t]) continue;
          double a = reward[b * T + t] - s.mean;
          if (o_.norm_by_std) a /= s.std + o_.eps;
          normalised[b * T + t] = a;
        }
      }
    }
    at::Tensor steps = at::tensor(normalised, at::kDouble).to(at::kFloat).view({B, T});
    return returns_are_advantages(discounted_returns(steps, m, discounts(in, o_.gamma)));
  }
  bool takes_kl_in_reward() const override { return false; }

 private:
  EstimatorOptions o_;
};

}  // namespace

at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& mask) {
  at::NoGradGuard no_grad;
  at::Tensor m = mask.to(at::kBool);
  const double n = m.sum().item<double>();
  if (n < 2) return at::zeros_like(x, x.options().dtype(at::kFloat));
  at::Tensor xd = at::where(m, x.to(at::kDouble), 0);
  const double mu = xd.sum().item<double>() / n;
  const double var = at::where(m, (xd - mu).pow(2), 0).sum().item<double>() / (n - 1);
  return ((x.to(at::kDouble) - mu) / std::sqrt(var + 1e-8)).to(at::kFloat);
}

at::Tensor scores_on_last_token(const at::Tensor& scores, const at::Tensor& mask) {
  at::Tensor m = mask.to(at::kBool);
  const int64_t T = m.size(1);
  at::Tensor positions = at::arange(T, at::kLong).unsqueeze(0).expand_as(m);
  // Index of the last valid token per row (-1 for an empty row).
  at::Tensor last = std::get<0>(at::where(m, positions, -1).max(1));
  at::Tensor out = at::zeros(m.sizes(), at::kFloat);
  at::Tensor is_last = positions.eq(last.unsqueeze(1)) & m;
  return at::where(is_last, scores.to(at::kFloat).unsqueeze(1).expand_as(out), out);
}

absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_gae(const EstimatorOptions& o) {
  return std::unique_ptr<AdvantageEstimator>(new Gae(o));
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_grpo(const EstimatorOptions& o) {
  return std::unique_ptr<AdvantageEstimator>(new Grpo(o, o.norm_by_std));
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_dr_grpo(const EstimatorOptions& o) {
  return std::unique_ptr<AdvantageEstimator>(new Grpo(o, /*norm_by_std=*/false));
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_rloo(const EstimatorOptions&) {
  return std::unique_ptr<AdvantageEstimator>(new Rloo());
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_reinforce_pp(const EstimatorOptions& o) {
  return std::unique_ptr<AdvantageEstimator>(new ReinforcePp(o));
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_reinforce_pp_baseline(
    const EstimatorOptions&) {
  return std::unique_ptr<AdvantageEstimator>(new ReinforcePpBaseline());
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_remax(const EstimatorOptions&) {
  return std::unique_ptr<AdvantageEstimator>(new Remax());
}
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> make_grpo_process(const EstimatorOptions& o) {
  return std::unique_ptr<AdvantageEstimator>(new GrpoProcess(o));
}

}  // namespace flywheel::algos
