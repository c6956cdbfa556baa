// Per-turn credit for multi-turn episodes: the environment's reward for each model turn sits on
// the turn's last token, the rest of the episode's score (what the run's rewards gave the whole
// episode) on its last valid token. Token-level estimators (gae, reinforce_pp) then credit each
// turn with what came after it; outcome estimators take the row sum, which is the score.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace flywheel::algos {

// One row's turns: turn_ends[k] is the index just past turn k's last token; turn_rewards[k] its
// reward (part of the row's score). Empty for a single-turn row. A process reward model's steps
// (step_ends, step_rewards) are paid the same way, inside or across turns.
struct RowTurns {
  const std::vector<int32_t>* turn_ends = nullptr;
  const std::vector<double>* turn_rewards = nullptr;
  const std::vector<int32_t>* step_ends = nullptr;
  const std::vector<double>* step_rewards = nullptr;
};

// [B, T] float32: for each row, turn_rewards[k] at token turn_ends[k] - 1 (and step_rewards[k]
// at step_ends[k] - 1) and scores[b] less those rewards at the last valid token of `mask` (a row
// without valid tokens gets nothing).
// `turns` has one entry per row; ends past T are ignored.
at::Tensor turn_rewards_on_tokens(const at::Tensor& scores, const at::Tensor& mask,
                                  const std::vector<RowTurns>& turns);

// [B, T] float32 AdvantageInput::reward_ends: 1 on the last token of every turn and step of
// `turns` (where turn_rewards_on_tokens pays), 0 elsewhere; ends past T are ignored.
at::Tensor reward_ends(const at::Tensor& mask, const std::vector<RowTurns>& turns);

// [B, T] float32 AdvantageInput::token_discounts: `discount` on the last token of every turn
// but a row's last (the step from one turn to the next), 1 elsewhere.
at::Tensor turn_discounts(const at::Tensor& mask, const std::vector<RowTurns>& turns,
                          double discount);

}  // namespace flywheel::algos
