#include "../../src/rewards/builtin_factories.h"
#include "flywheel/algos/dapo.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> ids(std::initializer_list<int32_t> v) { return v; }
std::vector<int32_t> n_ids(int64_t n) { return std::vector<int32_t>(n, 7); }

double score_of(const RewardPtr& reward, const OwnedSample& s) {
  EXPECT_TRUE(reward.ok()) << reward.status();
  auto out = (*reward)->score(s.view());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->score : -999;
}

TEST(LengthRewardsTest, OverlongPenaltyTable) {
  struct Case {
    std::map<std::string, std::string> params;
    int64_t max_new_tokens;
    int64_t length;
    double expected;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {{{"max_len", "20"}, {"buffer_len", "5"}}, 0, 15, 0.0, "at the start of the buffer"},
      {{{"max_len", "20"}, {"buffer_len", "5"}}, 0, 17, -0.4, "inside the buffer"},
      {{{"max_len", "20"}, {"buffer_len", "5"}, {"factor", "0.5"}}, 0, 20, -0.5, "factor"},
      {{}, 100, 90, -0.5, "defaults: max_len = max_new_tokens, buffer = max_len / 5"},
      {{}, 100, 10, 0.0, "short"},
      {{{"max_len", "20"}, {"buffer_len", "0"}}, 0, 20, 0.0, "off"},
      {{{"max_len", "20"}, {"buffer_len", "5"}}, 0, 40, -1.0, "no more than the full penalty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    RewardSpec spec = testing::spec("overlong_penalty", c.params, c.max_new_tokens);
    OwnedSample s = testing::sample("{}", "text", n_ids(c.length));
    EXPECT_NEAR(score_of(make_overlong_penalty_reward(spec), s), c.expected, 1e-12);
  }
  // One implementation with the algorithms' shaping.
  EXPECT_NEAR(algos::overlong_penalty(17, 20, 5, 1.0), -0.4, 1e-12);
  EXPECT_FALSE(
      make_overlong_penalty_reward(testing::spec("overlong_penalty", {})).ok());  // no max_len
  EXPECT_FALSE(make_overlong_penalty_reward(
                   testing::spec("overlong_penalty", {{"max_len", "4"}, {"buffer_len", "5"}}))
                   .ok());
}

TEST(LengthRewardsTest, LengthPenaltyTable) {
  struct Case {
    std::map<std::string, std::string> params;
    int64_t length;
    double expected;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {{}, 100, -0.1, "0.001 per token by default"},
      {{{"free_tokens", "50"}}, 100, -0.05, "free tokens"},
      {{{"free_tokens", "50"}}, 10, 0.0, "under the free tokens"},
      {{{"per_token", "0.1"}}, 100, -1.0, "capped at max_penalty"},
      {{{"per_token", "0.1"}, {"max_penalty", "5"}}, 100, -5.0, "max_penalty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    OwnedSample s = testing::sample("{}", "text", n_ids(c.length));
    EXPECT_NEAR(score_of(make_length_penalty_reward(testing::spec("length_penalty", c.params)), s),
                c.expected, 1e-12);
  }
}

TEST(LengthRewardsTest, RepetitionPenaltyTable) {
  struct Case {
    std::map<std::string, std::string> params;
    std::string text;
    std::vector<int32_t> ids;
    double expected;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {{}, "x", ids({1, 2, 3, 4, 5}), 0.0, "no repeated trigram"},
      {{}, "x", ids({1, 2, 3, 1, 2, 3}), -0.25, "1 of 4 trigrams repeated"},
      {{}, "x", ids({7, 7, 7, 7, 7, 7}), -0.75, "3 of 4 repeated"},
      {{{"ngram", "1"}}, "x", ids({1, 1, 2}), -1.0 / 3, "unigrams"},
      {{}, "x", ids({1, 2}), 0.0, "shorter than an n-gram"},
      {{{"unit", "words"}, {"ngram", "2"}}, "a b a b a b", {}, -0.6, "words: 3 of 5 bigrams"},
      {{{"unit", "words"}, {"ngram", "2"}, {"factor", "2"}}, "a b a b a b", {}, -1.2, "factor"},
      {{{"unit", "words"}}, std::string(1 << 20, 'a'), {}, 0.0, "one megabyte word"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    OwnedSample s = testing::sample("{}", c.text, c.ids);
    EXPECT_NEAR(
        score_of(make_repetition_penalty_reward(testing::spec("repetition_penalty", c.params)), s),
        c.expected, 1e-12);
  }
}

TEST(LengthRewardsTest, TokenCountsNeedTokenIds) {
  auto reward = make_length_penalty_reward(testing::spec("length_penalty", {}));
  OwnedSample s = testing::sample("{}", "some text", {});
  auto out = (*reward)->score(s.view());
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("no token ids"));
  EXPECT_FALSE(
      make_repetition_penalty_reward(testing::spec("repetition_penalty", {{"unit", "chars"}}))
          .ok());
}

}  // namespace
}  // namespace flywheel::rewards
