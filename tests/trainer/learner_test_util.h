// Synthetic learner inputs: trajectory groups of random tokens, masks, behaviour log-probs and
// rewards, drawn from a seed; and the options of a small GRPO learner.
#pragma once

#include <random>
#include <vector>

#include "flywheel/algos/advantages.h"
#include "flywheel/algos/is_correction.h"
#include "flywheel/algos/policy_loss.h"
#include "flywheel/buffer/trajectory.h"
#include "flywheel/trainer/learner.h"

namespace flywheel::trainer::testing {

inline std::vector<buffer::TrajectoryGroup> synthetic_groups(uint64_t seed, int64_t groups,
                                                             int64_t group_size, int64_t vocab,
                                                             int64_t max_response = 8) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<buffer::TrajectoryGroup> out;
  for (int64_t g = 0; g < groups; ++g) {
    buffer::TrajectoryGroup group;
    group.group_id = "g" + std::to_string(g);
    std::vector<int32_t> prompt;
    for (int64_t k = uniform(2, 6); k > 0; --k) prompt.push_back(uniform(0, vocab - 1));
    for (int64_t i = 0; i < group_size; ++i) {
      buffer::Trajectory t;
      t.prompt_ids = prompt;
      const int64_t n = uniform(1, max_response);
      for (int64_t k = 0; k < n; ++k) {
        t.response_ids.push_back(uniform(0, vocab - 1));
        t.loss_mask.push_back(uniform(0, 9) < 9 ? 1 : 0);
        t.logprobs.push_back(-0.1f - static_cast<float>(uniform(0, 300)) / 100.0f);
        t.versions.push_back(0);
      }
      t.reward = static_cast<double>(uniform(0, 1));
      t.sample_index = i;
      group.trajectories.push_back(std::move(t));
    }
    out.push_back(std::move(group));
  }
  return out;
}

// A GRPO-style algorithm (grpo advantages, ppo_clip, `agg`, IS `correction`).
inline algos::Algorithm test_algorithm(algos::AggMode agg, const std::string& correction = "tis",
                                       const std::string& estimator = "grpo") {
  algos::Algorithm a;
  algos::EstimatorOptions e;
  a.estimator = estimator == "gae" ? *algos::make_gae(e) : *algos::make_grpo(e);
  a.policy_loss = *algos::make_ppo_clip({0.2, 0.28, 3.0});
  a.is_correction = *algos::make_is_correction(correction, {});
  a.agg = agg;
  a.norm_constant = 8;
  return a;
}

}  // namespace flywheel::trainer::testing
