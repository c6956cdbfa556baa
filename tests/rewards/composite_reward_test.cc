#include "flywheel/rewards/composite_reward.h"

#include "flywheel/rewards/builtins.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"
#include "test_rewards.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

core::RewardFunctionOptions fn(std::string name, double weight,
                               std::map<std::string, std::string> params = {},
                               std::string label = "") {
  core::RewardFunctionOptions o;
  o.name = std::move(name);
  o.weight = weight;
  o.params = std::move(params);
  o.label = std::move(label);
  return o;
}

TEST(CompositeRewardTest, WeightedSumWithPartsAndComponents) {
  core::PluginRegistry registry;
  ASSERT_TRUE(register_rewards_builtins(registry).ok());
  core::RewardsOptions options;
  options.functions = {fn("exact_match", 1.0),
                       fn("format_regex", 0.5, {{"pattern", "\\d+"}}, "digits"),
                       fn("repetition_penalty", 2.0, {{"ngram", "1"}})};
  auto composite = CompositeReward::create(options, registry, 16, "");
  ASSERT_TRUE(composite.ok()) << composite.status();
  OwnedSample s = testing::sample(R"({"answer": "42"})", "42", {5, 5});
  ScoredSample out = (*composite)->score(s.view());
  // 1 x 1 + 0.5 x 1 + 2 x (-0.5)
  EXPECT_DOUBLE_EQ(out.reward, 0.5);
  EXPECT_EQ(out.parts.at("exact_match"), 1);
  EXPECT_EQ(out.parts.at("digits"), 1);
  EXPECT_EQ(out.parts.at("repetition_penalty"), -0.5);
  EXPECT_EQ(out.parts.at("repetition_penalty/repeated_ratio"), 0.5);
  EXPECT_TRUE(out.errors.empty());
}

TEST(CompositeRewardTest, AFailingFunctionScoresTheFallbackAndIsReported) {
  auto scripted = std::make_shared<testing::ScriptedReward>();
  CompositeReward composite({{"ok", 1.0, scripted}, {"bad", 2.0, scripted}}, -1.0);
  OwnedSample s = testing::sample("{}", "error");
  ScoredSample out = composite.score(s.view());
  EXPECT_EQ(out.reward, -3.0);
  ASSERT_EQ(out.errors.size(), 2u);
  EXPECT_THAT(out.errors[1], HasSubstr("bad: scripted error"));
}

// Process rewards (issue 32): each part's step rewards times its weight, merged by where they
// end; a part that fails gives none (its fallback is paid at the end).
class SteppedReward : public RewardFunction {
 public:
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    if (input.completion == "error") return absl::InvalidArgumentError("no steps");
    RewardOutput out;
    out.step_ends = {1, 3};
    out.step_rewards = {0.25, 0.5};
    out.score = 0.75;
    return out;
  }
};

TEST(CompositeRewardTest, StepRewardsAreWeightedAndMergedByEnd) {
  auto stepped = std::make_shared<SteppedReward>();
  auto scripted = std::make_shared<testing::ScriptedReward>();
  CompositeReward composite({{"a", 2.0, stepped}, {"b", 1.0, stepped}, {"len", 1.0, scripted}},
                            -1.0);
  OwnedSample s = testing::sample("{}", "abc");
  ScoredSample out = composite.score(s.view());
  EXPECT_DOUBLE_EQ(out.reward, 3 * 0.75 + 3);
  EXPECT_EQ(out.step_ends, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(out.step_rewards, (std::vector<double>{0.75, 1.5}));
  CompositeReward failing({{"a", 1.0, stepped}}, -1.0);
  OwnedSample bad = testing::sample("{}", "error");
  out = failing.score(bad.view());
  EXPECT_EQ(out.reward, -1.0);
  EXPECT_TRUE(out.step_ends.empty());
}

TEST(CompositeRewardTest, ConfigErrorsNameTheFunction) {
  core::PluginRegistry registry;
  ASSERT_TRUE(register_rewards_builtins(registry).ok());
  struct Case {
    std::vector<core::RewardFunctionOptions> functions;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{fn("exact_match", 1), fn("exact_mtch", 1)},
       "rewards.functions[1] (exact_mtch): unknown reward 'exact_mtch'"},
      {{fn("exact_match", 1, {{"strp", "true"}})}, "did you mean 'strip'?"},
      {{fn("exact_match", 1), fn("exact_match", 1)}, "label 'exact_match' is used twice"},
      {{fn("", 1)}, "functions[0].name: must be set"},
  };
  for (const Case& c : cases) {
    core::RewardsOptions options;
    options.functions = c.functions;
    auto composite = CompositeReward::create(options, registry, 16, "");
    ASSERT_FALSE(composite.ok()) << c.error;
    EXPECT_THAT(std::string(composite.status().message()), HasSubstr(c.error));
  }
  core::RewardsOptions twice;
  twice.functions = {fn("exact_match", 1), fn("exact_match", 1, {}, "again")};
  EXPECT_TRUE(CompositeReward::create(twice, registry, 16, "").ok());
}

}  // namespace
}  // namespace flywheel::rewards
