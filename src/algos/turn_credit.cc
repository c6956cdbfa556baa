#include "flywheel/algos/turn_credit.h"

#include <vector>

#include <ATen/ATen.h>

namespace flywheel::algos {

at::Tensor turn_rewards_on_tokens(const at::Tensor& scores, const at::Tensor& mask,
                                  const std::vector<RowTurns>& turns) {
  const int64_t B = mask.size(0), T = mask.size(1);
  at::Tensor m = mask.to(at::kFloat).contiguous();
  at::Tensor s = scores.to(at::kDouble).contiguous();
  const float* valid = m.data_ptr<float>();
  const double* score = s.data_ptr<double>();
  std::vector<float> out(B * T, 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    int64_t last = -1;
    for (int64_t t = T - 1; t >= 0 && last < 0; --t) {
      if (valid[b * T + t] != 0) last = t;
    }
    if (last < 0) continue;
    double rest = score[b];
    const RowTurns& row = b < static_cast<int64_t>(turns.size()) ? turns[b] : RowTurns{};
    auto pay = [&](const std::vector<int32_t>* ends, const std::vector<double>* rewards) {
      if (ends == nullptr || rewards == nullptr) return;
      for (size_t k = 0; k < ends->size() && k < rewards->size(); ++k) {
        const int64_t at = static_cast<int64_t>((*ends)[k]) - 1;
        if (at < 0 || at >= T) continue;
        out[b * T + at] += static_cast<float>((*rewards)[k]);
        rest -= (*rewards)[k];
      }
    };
    pay(row.turn_ends, row.turn_rewards);
    pay(row.step_ends, row.step_rewards);
    out[b * T + last] += static_cast<float>(rest);
  }
  return at::tensor(out, at::kFloat).view({B, T});
}

at::Tensor reward_ends(const at::Tensor& mask, const std::vector<RowTurns>& turns) {
  const int64_t B = mask.size(0), T = mask.size(1);
  std::vector<float> out(B * T, 0.0f);
  for (int64_t b = 0; b < B && b < static_cast<int64_t>(turns.size()); ++b) {
    for (const std::vector<int32_t>* ends : {turns[b].turn_ends, turns[b].step_ends}) {
      if (ends == nullptr) continue;
      for (int32_t end : *ends) {
        if (end >= 1 && end <= T) out[b * T + end - 1] = 1.0f;
      }
    }
  }
  return at::tensor(out, at::kFloat).view({B, T});
}

at::Tensor turn_discounts(const at::Tensor& mask, const std::vector<RowTurns>& turns,
                          double discount) {
  const int64_t B = mask.size(0), T = mask.size(1);
  std::vector<float> out(B * T, 1.0f);
  for (int64_t b = 0; b < B && b < static_cast<int64_t>(turns.size()); ++b) {
    if (turns[b].turn_ends == nullptr) continue;
    const std::vector<int32_t>& ends = *turns[b].turn_ends;
    for (size_t k = 0; k + 1 < ends.size(); ++k) {
      const int64_t at = static_cast<int64_t>(ends[k]) - 1;
      if (at >= 0 && at < T) out[b * T + at] = static_cast<float>(discount);
    }
  }
  return at::tensor(out, at::kFloat).view({B, T});
}

}  // namespace flywheel::algos
