#include "../../src/rewards/builtin_factories.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::map<std::string, std::string> params;
  std::string record;
  std::string completion;
  double expected;
  std::string reason;
};

TEST(ExactMatchRewardTest, Table) {
  const std::vector<Case> cases = {
      {{}, R"({"answer": "Paris"})", "Paris", 1, "identical"},
      {{}, R"({"answer": "Paris"})", "  Paris\n", 1, "strip (default)"},
      {{{"strip", "false"}}, R"({"answer": "Paris"})", " Paris", 0, "strip off"},
      {{}, R"({"answer": "New York"})", "New   York", 1, "whitespace collapsed (default)"},
      {{{"collapse_whitespace", "false"}},
       R"({"answer": "New York"})",
       "New  York",
       0,
       "whitespace kept"},
      {{}, R"({"answer": "Paris"})", "paris", 0, "case sensitive by default"},
      {{{"lowercase", "true"}}, R"({"answer": "Paris"})", "PARIS", 1, "lowercase"},
      {{}, R"({"answer": "Paris"})", "Paris.", 0, "punctuation kept by default"},
      {{{"remove_punctuation", "true"}},
       R"({"answer": "Paris"})",
       "Paris.",
       1,
       "punctuation removed"},
      {{}, R"({"answer": 42})", "42", 1, "a number reference"},
      {{}, R"({"answer": ["Paris", "paris, France"]})", "paris, France", 1, "one of a list"},
      {{}, R"({"answer": ["Paris"]})", "Lyon", 0, "none of a list"},
      {{}, R"({"answer": "Paris"})", "Paris is the answer", 0, "not a substring match"},
      {{}, R"({"answer": ""})", "", 1, "empty equals empty"},
      {{}, R"({"answer": "a"})", std::string("a\0b", 3), 0, "NUL byte in the completion"},
      {{}, R"({"answer": "a"})", "\xff\xfe", 0, "invalid UTF-8"},
      {{}, R"({"answer": "a"})", std::string(1 << 20, 'a'), 0, "a megabyte line"},
      {{{"answer_key", "label"}}, R"({"label": "x"})", "x", 1, "answer_key"},
      {{{"after", "</result>"}},
       R"({"answer": "5535"})",
       "<calc>123*45</calc><result>5535</result>5535",
       1,
       "after the last tool reply"},
      {{{"after", "</result>"}},
       R"({"answer": "5535"})",
       "<calc>1*2</calc><result>2</result><calc>123*45</calc><result>5535</result>",
       0,
       "nothing after the last reply"},
      {{{"after", "</result>"}}, R"({"answer": "5535"})", "5535", 1, "no reply: the whole"},
      {{}, R"({"answer": "5535"})", "<result>5535</result>5535", 0, "after unset: the whole"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    RewardSpec spec = testing::spec("exact_match", c.params);
    auto reward = make_exact_match_reward(spec);
    ASSERT_TRUE(reward.ok()) << reward.status();
    OwnedSample s = testing::sample(c.record, c.completion);
    auto out = (*reward)->score(s.view());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->score, c.expected);
  }
}

TEST(ExactMatchRewardTest, ErrorsNameTheRecordAndKey) {
  auto reward = make_exact_match_reward(testing::spec("exact_match", {}));
  ASSERT_TRUE(reward.ok());
  OwnedSample s = testing::sample(R"({"question": "q"})", "x");
  auto out = (*reward)->score(s.view());
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("record 1"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'answer'"));
  OwnedSample bad = testing::sample(R"({"answer": {"a": 1}})", "x");
  EXPECT_THAT(std::string((*reward)->score(bad.view()).status().message()),
              HasSubstr("must be a string, a number or a list"));
  EXPECT_FALSE(
      make_exact_match_reward(testing::spec("exact_match", {{"lower_case", "true"}})).ok());
}

}  // namespace
}  // namespace flywheel::rewards
