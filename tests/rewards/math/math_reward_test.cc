#include "math/math_reward.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "builtin_factories.h"
#include "flywheel/core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rewards::math {
namespace {

using ::testing::HasSubstr;

RewardSpec make_spec(std::map<std::string, std::string> params) {
  RewardSpec spec;
  spec.name = "math";
  spec.params = std::move(params);
  return spec;
}

std::unique_ptr<RewardFunction> make_reward(std::map<std::string, std::string> params = {}) {
  RewardPtr reward = make_math_reward(make_spec(std::move(params)));
  EXPECT_TRUE(reward.ok()) << reward.status();
  return reward.ok() ? std::move(*reward) : nullptr;
}

core::Json record_with(const char* key, core::Json answer) {
  core::Json record = core::Json::object();
  record.set(key, std::move(answer));
  return record;
}

absl::StatusOr<RewardOutput> score(const RewardFunction& reward, const core::Json& record,
                                   absl::string_view completion) {
  RewardInput input;
  input.record = &record;
  input.record_name = "line 7";
  input.completion = completion;
  return reward.score(input);
}

// Score of `completion` against reference `answer`, or -1 on error.
double score_of(const RewardFunction& reward, core::Json answer, absl::string_view completion) {
  absl::StatusOr<RewardOutput> out =
      score(reward, record_with("answer", std::move(answer)), completion);
  return out.ok() ? out->score : -1;
}

TEST(MathRewardTest, ScoresCorrectAndWrongWithComponents) {
  auto reward = make_reward();
  const core::Json record = record_with("answer", "\\frac{1}{2}");
  absl::StatusOr<RewardOutput> right = score(*reward, record, "so it is \\boxed{0.5}.");
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(right->score, 1.0);
  EXPECT_EQ(right->components.at("format"), 1.0);
  EXPECT_EQ(right->components.at("correct"), 1.0);
  absl::StatusOr<RewardOutput> wrong = score(*reward, record, "so it is \\boxed{2}.");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->score, 0.0);
  EXPECT_EQ(wrong->components.at("format"), 1.0);
  EXPECT_EQ(wrong->components.at("correct"), 0.0);
  absl::StatusOr<RewardOutput> none = score(*reward, record, "I think one half");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->score, 0.0);
  EXPECT_EQ(none->components.at("format"), 0.0);
  EXPECT_EQ(none->components.at("correct"), 0.0);
}

TEST(MathRewardTest, ReadsReferencesInEveryForm) {
  auto reward = make_reward();
  EXPECT_EQ(score_of(*reward, core::Json(42), "\\boxed{42}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json(42), "\\boxed{42.0}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json(0.1), "\\boxed{\\frac{1}{10}}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json(-2.5), "\\boxed{-\\frac52}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json(1e20), "\\boxed{100000000000000000000}"), 1.0);
  EXPECT_EQ(score_of(*reward, "Natalia sold 48/2 = 24 clips.\n#### 72", "#### 72"), 1.0);
  EXPECT_EQ(score_of(*reward, "Natalia sold 48/2 = 24 clips.\n#### 72", "#### 24"), 0.0);
  EXPECT_EQ(score_of(*reward, "so $x = \\boxed{\\frac{\\pi}{2}}$", "\\boxed{\\pi/2}"), 1.0);
  core::Json any = core::Json::array({"1/2", 0.5, "\\frac{2}{4}"});
  EXPECT_EQ(score_of(*reward, any, "\\boxed{0.5}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json::array({"3", "4"}), "\\boxed{4}"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json::array({"3", "4"}), "\\boxed{5}"), 0.0);
}

TEST(MathRewardTest, ExtractsFromCompletionsInEveryFormat) {
  auto reward = make_reward();
  EXPECT_EQ(score_of(*reward, "7", "\\boxed{3} no wait \\boxed{7}"), 1.0);
  EXPECT_EQ(score_of(*reward, "3", "\\boxed{3} no wait \\boxed{7}"), 0.0);
  EXPECT_EQ(score_of(*reward, "7", "\\fbox{7}"), 1.0);
  EXPECT_EQ(score_of(*reward, "7", "So 3 + 4 = 7.\n#### 7"), 1.0);
  EXPECT_EQ(score_of(*reward, "7", "The answer is 7."), 1.0);
  EXPECT_EQ(score_of(*reward, "7", "The answer is $7$. I hope it is correct."), 1.0);
  EXPECT_EQ(score_of(*reward, "7", "3 + 4 = 7"), 0.0);  // no fallback by default
  auto fallback = make_reward({{"fallback_to_last_number", "true"}});
  EXPECT_EQ(score_of(*fallback, "7", "3 + 4 = 7"), 1.0);
  EXPECT_EQ(score_of(*fallback, "7", "7 is not it, 8"), 0.0);
  EXPECT_EQ(score_of(*fallback, "1234", "total 1,234."), 1.0);
}

// Review fixes: each of these scored wrong before them.
TEST(MathRewardTest, PaysOnlyForTheAnswerStatedLast) {
  auto reward = make_reward();
  EXPECT_EQ(score_of(*reward, "42", "<think>maybe \\boxed{42}? no wait.</think> The answer is 7."),
            0.0);
  EXPECT_EQ(score_of(*reward, "7", "<think>maybe \\boxed{42}? no wait.</think> The answer is 7."),
            1.0);
  EXPECT_EQ(score_of(*reward, "42", "I think \\boxed{42}. Hmm, actually\n#### 7"), 0.0);
  EXPECT_EQ(score_of(*reward, "5", "So the answer is \\boxed{5}. I hope this answer is correct."),
            1.0);
  EXPECT_EQ(score_of(*reward, "5", "The answer is 5 or more."), 0.0);
  EXPECT_EQ(score_of(*reward, "5", "The answer is 5 or fewer."), 0.0);
  EXPECT_EQ(score_of(*reward, "5", "The answer is 5 at most."), 0.0);
  EXPECT_EQ(score_of(*reward, "5", "The answer is 5 apples."), 1.0);
}

TEST(MathRewardTest, ReadsCurrencyBoxesAndChoices) {
  auto reward = make_reward();
  EXPECT_EQ(score_of(*reward, "18", "The answer is $18. I hope this helps!"), 1.0);
  EXPECT_EQ(score_of(*reward, core::Json(18), "The answer is $18.00. Thanks"), 1.0);
  EXPECT_EQ(score_of(*reward, "5", "\\boxed{\\boxed{5}}"), 1.0);
  EXPECT_EQ(score_of(*reward, "5", "so \\boxed5"), 1.0);
  EXPECT_EQ(score_of(*reward, "A", "\\boxed{\\text{(A)}}"), 1.0);
  EXPECT_EQ(score_of(*reward, "B", "\\boxed{\\text{(A)}}"), 0.0);
  EXPECT_EQ(score_of(*reward, "\\{1\\}", "\\boxed{\\{1, 1\\}}"), 1.0);
  EXPECT_EQ(score_of(*reward, "\\emptyset", "\\boxed{\\{ \\}}"), 1.0);
}

TEST(MathRewardTest, NeverPaysARationalForAnIrrational) {
  auto reward = make_reward();
  EXPECT_EQ(score_of(*reward, "\\pi", "\\boxed{\\frac{355}{113}}"), 0.0);
  EXPECT_EQ(score_of(*reward, "\\pi", "\\boxed{3.14}"), 0.0);
  EXPECT_EQ(score_of(*reward, "\\pi", "\\boxed{3.14159}"), 0.0);
  EXPECT_EQ(score_of(*reward, "\\sqrt{2}", "\\boxed{1.414214}"), 0.0);
  EXPECT_EQ(score_of(*reward, "\\sqrt{2}", "\\boxed{1.4142135624}"), 1.0);
  EXPECT_EQ(score_of(*reward, "2^{200}", "\\boxed{2^{200}+1}"), 0.0);
  EXPECT_EQ(score_of(*reward, "0", "\\boxed{10^{-40}}"), 0.0);
  // Even a loose tolerance never pays a fraction for an irrational.
  auto loose = make_reward({{"tolerance", "0.01"}});
  EXPECT_EQ(score_of(*loose, "\\pi", "\\boxed{\\frac{22}{7}}"), 0.0);
}

TEST(MathRewardTest, AppliesOptions) {
  auto reward = make_reward({{"answer_key", "solution"},
                             {"tolerance", "0.01"},
                             {"correct_score", "2"},
                             {"wrong_score", "-1"}});
  const core::Json record = record_with("solution", "\\pi");
  EXPECT_EQ(score(*reward, record, "\\boxed{3.14}")->score, 2.0);  // a decimal within 1%
  EXPECT_EQ(score(*reward, record, "\\boxed{3}")->score, -1.0);
  EXPECT_EQ(score(*reward, record, "no answer")->score, -1.0);
  auto strict = make_reward({{"tolerance", "0"}});
  EXPECT_EQ(score_of(*strict, "\\sqrt{2}", "\\boxed{1.41421356}"), 0.0);
  EXPECT_EQ(score_of(*strict, "2\\sqrt{2}", "\\boxed{\\sqrt{8}}"), 1.0);  // exact square root
}

TEST(MathRewardTest, MissingAnswerKeyIsAnErrorNamingRecordAndKey) {
  auto reward = make_reward({{"answer_key", "gold"}});
  const core::Json record = record_with("answer", "1");
  absl::StatusOr<RewardOutput> out = score(*reward, record, "\\boxed{1}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("line 7"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'gold'"));
  // A null answer and a record that is not an object are missing keys too.
  EXPECT_FALSE(score(*reward, record_with("gold", core::Json()), "\\boxed{1}").ok());
  EXPECT_FALSE(score(*reward, core::Json("just a string"), "\\boxed{1}").ok());
}

TEST(MathRewardTest, AnswerOfTheWrongTypeIsAnError) {
  auto reward = make_reward();
  for (const core::Json& bad :
       {core::Json(true), core::Json::object(), core::Json::array({"1", core::Json::array()})}) {
    absl::StatusOr<RewardOutput> out = score(*reward, record_with("answer", bad), "\\boxed{1}");
    ASSERT_FALSE(out.ok()) << bad.dump();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("line 7"));
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("'answer'"));
    EXPECT_FALSE(score(*reward, record_with("answer", bad), "no answer").ok()) << bad.dump();
  }
}

TEST(MathRewardTest, RejectsUnknownAndBadOptions) {
  RewardPtr typo = make_math_reward(make_spec({{"tolerence", "0.1"}}));
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("tolerence"));
  EXPECT_FALSE(make_math_reward(make_spec({{"tolerance", "-1"}})).ok());
  EXPECT_FALSE(make_math_reward(make_spec({{"tolerance", "abc"}})).ok());
  EXPECT_FALSE(make_math_reward(make_spec({{"fallback_to_last_number", "maybe"}})).ok());
  EXPECT_FALSE(make_math_reward(make_spec({{"correct_score", "nan"}})).ok());
  EXPECT_FALSE(make_math_reward(make_spec({{"answer_key", ""}})).ok());
  EXPECT_TRUE(make_math_reward(make_spec({{"answer_key", "gold"}, {"tolerance", "0"}})).ok());
}

// Bad input: scored (0 here) in bounded time and memory, never a crash.
TEST(MathRewardTest, ScoresBadInputsWithoutCrashing) {
  auto reward = make_reward({{"fallback_to_last_number", "true"}});
  const core::Json record = record_with("answer", "42");
  struct BadInput {
    std::string completion;
    double expected;
    const char* reason;
  };
  std::string long_line(1 << 20, 'a');
  std::string long_boxed = "\\boxed{" + std::string(1 << 20, '4') + "}";
  std::string many_boxes;
  for (int i = 0; i < 50000; ++i) many_boxes += "\\boxed{1}";
  std::string deep_boxes;
  for (int i = 0; i < 100000; ++i) deep_boxes += "\\boxed{";
  std::string many_answer_is;
  for (int i = 0; i < 100000; ++i) many_answer_is += "answer is answer is";
  std::string dollars(1 << 20, '$');
  std::string backslashes(1 << 20, '\\');
  const BadInput cases[] = {
      {std::string("\xFF\xFE\xC3\x28 \\boxed{\xE2\x82} 42"), 0.0, "invalid UTF-8"},
      {std::string("\\boxed{42\0}", 11), 0.0, "a NUL byte in the answer"},
      {std::string("\0\0\0 \\boxed{42}", 15), 1.0, "NUL bytes before the answer"},
      {long_line, 0.0, "a megabyte line without digits"},
      {long_line + " \\boxed{42}", 1.0, "a megabyte of text before the answer"},
      {long_line + "42", 1.0, "a megabyte line, last-number fallback"},
      {long_boxed, 0.0, "a megabyte answer"},
      {std::string(100000, '{') + "42" + std::string(100000, '}'), 1.0,
       "10^5 nested braces before the last number"},
      {"\\boxed{" + std::string(100000, '{') + "42" + std::string(100000, '}') + "}", 0.0,
       "10^5 nested braces in the box"},
      {"\\boxed{" + std::string(100000, '{') + "42", 1.0, "10^5 unclosed braces"},
      {deep_boxes + "42", 1.0, "10^5 unclosed boxes, last number"},
      {"\\boxed{" + std::string(10000, '4') + "}", 0.0, "a number with 10^4 digits"},
      {"\\boxed{42." + std::string(10000, '0') + "}", 0.0,
       "10^4 digits, too long an answer even if zeros"},
      {"\\boxed{" + std::string(400, '(') + "42" + std::string(400, ')') + "}", 0.0,
       "nesting past the expression depth"},
      {"\\boxed{" + std::string(300, '-') + "42}", 0.0, "a chain of signs past the depth"},
      {many_boxes, 0.0, "50,000 boxes"},
      {many_answer_is, 0.0, "10^5 answer phrases"},
      {dollars, 0.0, "a megabyte of dollar signs"},
      {backslashes, 0.0, "a megabyte of backslashes"},
      {"\\boxed{2^{99999999}}", 0.0, "a huge power"},
      {"\\boxed{10^{10^{10^{10}}}}", 0.0, "a power tower"},
      {"\\boxed{\\sqrt[99999999]{2}}", 0.0, "a huge root index"},
      {"\\boxed{1e999999}", 0.0, "a huge exponent literal"},
      {"\\boxed{\\frac{42}{0}}", 0.0, "a division by zero"},
  };
  for (const BadInput& c : cases) {
    absl::StatusOr<RewardOutput> out = score(*reward, record, c.completion);
    ASSERT_TRUE(out.ok()) << c.reason << ": " << out.status();
    EXPECT_EQ(out->score, c.expected) << c.reason;
  }
}

TEST(MathRewardTest, IsSafeToShareAcrossThreads) {
  auto reward = make_reward();
  const core::Json record = record_with("answer", "(1, \\frac{1}{2}]");
  std::vector<std::thread> threads;
  std::atomic<int> correct{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        correct += score(*reward, record, "\\boxed{(1, 0.5]}")->score == 1.0;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(correct.load(), 2000);
}

}  // namespace
}  // namespace flywheel::rewards::math
