#include "../../src/rewards/builtin_factories.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

constexpr char kThink[] = R"(<think>.+?</think>\s*<answer>.+?</answer>)";

struct Case {
  std::map<std::string, std::string> params;
  std::string completion;
  double expected;
  std::string reason;
};

TEST(FormatRegexRewardTest, Table) {
  const std::vector<Case> cases = {
      {{{"pattern", kThink}},
       "<think>a\nb</think>\n<answer>4</answer>",
       1,
       "think then answer, dot matches newlines"},
      {{{"pattern", kThink}}, "<answer>4</answer>", 0, "no think block"},
      {{{"pattern", kThink}},
       "<think>a</think><answer>4</answer> trailing",
       0,
       "full match by default"},
      {{{"pattern", kThink}, {"full_match", "false"}},
       "x <think>a</think><answer>4</answer> y",
       1,
       "search when full_match is false"},
      {{{"pattern", "a.b"}, {"dotall", "false"}}, "a\nb", 0, "dot stops at newline"},
      {{{"pattern", "a.b"}}, "a\nb", 1, "dotall by default"},
      {{{"pattern", "\\d+"}, {"score", "0.5"}}, "123", 0.5, "custom score"},
      {{{"pattern", "\\d+"}}, "12\xff", 0, "invalid UTF-8 matches nothing"},
      {{{"pattern", "a.*b"}}, std::string("a\0b", 3), 1, "a NUL byte is a character"},
      {{{"pattern", "a+"}}, std::string(1 << 20, 'a'), 1, "a megabyte line"},
      {{{"pattern", "é+"}}, "ééé", 1, "UTF-8 pattern"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    auto reward = make_format_regex_reward(testing::spec("format_regex", c.params));
    ASSERT_TRUE(reward.ok()) << reward.status();
    OwnedSample s = testing::sample("{}", c.completion);
    auto out = (*reward)->score(s.view());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->score, c.expected);
  }
}

TEST(FormatRegexRewardTest, CatastrophicBacktrackingIsBoundedAndScoresZero) {
  auto reward = make_format_regex_reward(testing::spec("format_regex", {{"pattern", "(a+)+$"}}));
  ASSERT_TRUE(reward.ok());
  OwnedSample s = testing::sample("{}", std::string(5000, 'a') + "!");
  auto out = (*reward)->score(s.view());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->score, 0);
  // Either PCRE2 proves no match quickly or the match limit stops it.
  auto deep = make_format_regex_reward(
      testing::spec("format_regex", {{"pattern", "^(\\w+\\s?)*$"}, {"full_match", "false"}}));
  ASSERT_TRUE(deep.ok());
  OwnedSample d = testing::sample("{}", std::string(100000, 'y') + "!");
  auto o2 = (*deep)->score(d.view());
  ASSERT_TRUE(o2.ok()) << o2.status();
  EXPECT_EQ(o2->score, 0);
  EXPECT_EQ(o2->components.count("limit_exceeded"), 1u);
}

TEST(FormatRegexRewardTest, BadOptionsAreErrors) {
  EXPECT_THAT(
      std::string(make_format_regex_reward(testing::spec("format_regex", {})).status().message()),
      HasSubstr("'pattern' must be set"));
  EXPECT_THAT(
      std::string(make_format_regex_reward(testing::spec("format_regex", {{"pattern", "(a"}}))
                      .status()
                      .message()),
      HasSubstr("does not compile at offset"));
  EXPECT_FALSE(
      make_format_regex_reward(testing::spec("format_regex", {{"pattern", "a"}, {"flags", "i"}}))
          .ok());
}

}  // namespace
}  // namespace flywheel::rewards
