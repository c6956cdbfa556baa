// Per-turn credit of multi-turn episodes (issue 28): turn rewards on the turn ends, the rest of
// the score on the last valid token; token-level estimators credit a turn with what came after.
#include "flywheel/algos/turn_credit.h"

#include <vector>

#include <ATen/ATen.h>

#include "flywheel/algos/advantages.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace flywheel::algos {
namespace {

using testing::expect_near;
using testing::T;

TEST(TurnCreditTest, TurnRewardsSitOnTurnEndsAndTheRestOfTheScoreOnTheLastToken) {
  // Row 0: turn 0 = tokens 0-1 (reward 0.5), an observation at 2-3 (masked), turn 1 = token 4,
  // score 1.5 (0.5 of it the turn's); row 1: single-turn, score 2; row 2: nothing valid.
  const at::Tensor mask = T({1, 1, 0, 0, 1,  //
                             1, 1, 1, 0, 0,  //
                             0, 0, 0, 0, 0},
                            {3, 5});
  const at::Tensor scores = at::tensor(std::vector<double>{1.5, 2, 3});
  const std::vector<int32_t> ends = {2, 5};
  const std::vector<double> rewards = {0.5, 0};
  const at::Tensor r = turn_rewards_on_tokens(scores, mask, {{&ends, &rewards}, {}, {}});
  expect_near(r, {0, 0.5, 0, 0, 1,  //
                  0, 0, 2, 0, 0,    //
                  0, 0, 0, 0, 0});
  // Row sums are the scores (outcome estimators see the episode return) where a token is valid.
  expect_near(r.sum(1), {1.5, 2, 0});
  // A process reward model's steps are paid where they end, beside the turns (issue 32).
  const std::vector<int32_t> step_ends = {1, 2};
  const std::vector<double> step_rewards = {0.25, 0.125};
  const at::Tensor s = turn_rewards_on_tokens(scores, mask,
                                              {{&ends, &rewards, &step_ends, &step_rewards},
                                               {nullptr, nullptr, &step_ends, &step_rewards},
                                               {}});
  expect_near(s, {0.25, 0.625, 0, 0, 0.625,  //
                  0.25, 0.125, 1.625, 0, 0,  //
                  0, 0, 0, 0, 0});
  // grpo_process reads the rewards where turns and steps end (an end past T is ignored).
  const std::vector<int32_t> far = {2, 9};
  expect_near(reward_ends(mask, {{&ends, &rewards, &step_ends, &step_rewards},
                                 {nullptr, nullptr, &far, &step_rewards},
                                 {}}),
              {1, 1, 0, 0, 1,  //
               0, 1, 0, 0, 0,  //
               0, 0, 0, 0, 0});
}

TEST(TurnCreditTest, ReinforcePpCreditsATurnWithWhatCameAfterIt) {
  const at::Tensor mask = T({1, 1, 0, 0, 1}, {1, 5});
  const std::vector<int32_t> ends = {2, 5};
  const std::vector<double> rewards = {-0.25, 0};
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{0.75});  // 1 from the rewards, -0.25 the turn's
  in.mask = mask;
  in.token_rewards = turn_rewards_on_tokens(in.scores, mask, {{&ends, &rewards}});
  auto r = make_reinforce_pp({})->get()->compute(in);
  ASSERT_TRUE(r.ok()) << r.status();
  // gamma 1: turn 0's tokens see -0.25 + 1, turn 1's token only the final 1.
  expect_near(r->returns, {0.75, 0.75, 0, 0, 1});
}

// environment.turn_discount: the step from one turn to the next is discounted (0.5 here), on
// top of gamma per token; GAE with zero values and lambda 1 gives the same returns.
TEST(TurnCreditTest, TurnDiscountDiscountsTheNextTurnsReturn) {
  const at::Tensor mask = T({1, 1, 0, 0, 1}, {1, 5});
  const std::vector<int32_t> ends = {2, 5};
  const std::vector<double> rewards = {0, 0};
  expect_near(turn_discounts(mask, {{&ends, &rewards}}, 0.5), {1, 0.5, 1, 1, 1});
  AdvantageInput in;
  in.scores = at::tensor(std::vector<float>{1});
  in.mask = mask;
  in.token_discounts = turn_discounts(mask, {{&ends, &rewards}}, 0.5);
  auto r = make_reinforce_pp({})->get()->compute(in);
  ASSERT_TRUE(r.ok()) << r.status();
  expect_near(r->returns, {0.5, 0.5, 0, 0, 1});
  in.values = at::zeros({1, 5});
  EstimatorOptions o;
  o.whiten = false;
  auto g = make_gae(o)->get()->compute(in);
  ASSERT_TRUE(g.ok()) << g.status();
  expect_near(g->returns, {0.5, 0.5, 0, 0, 1});
  in.token_discounts = at::ones({2, 5});
  EXPECT_FALSE(make_reinforce_pp({})->get()->compute(in).ok());  // misshapen
}

}  // namespace
}  // namespace flywheel::algos
