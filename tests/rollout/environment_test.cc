#include "flywheel/rollout/environment.h"

#include <string>
#include <vector>

#include "environments/arithmetic.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/rollout/logits_processor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

TEST(ArithmeticTest, EvaluatesExactly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"123*45", "5535"},
      {"1234 + 5678 + 9012 + 3456 + 7890", "27270"},
      {"(3+4)*2 - 10/4", "11.5"},
      {"1/3", "0.333333333333"},
      {"-1/3", "-0.333333333333"},
      {"-2^2", "-4"},
      {"2**10", "1024"},
      {"2^-2", "0.25"},
      {"2^3^2", "512"},  // right-associative
      {"0.1 + 0.2", "0.3"},
      {"-7 % 3", "2"},  // the divisor's sign, as Python
      {"7 % -3", "-2"},
      {".5*4", "2"},
      {"99999999999999999999 * 99999999999999999", "9999999999999999899900000000000000001"},
      {"--3", "3"},
  };
  for (const auto& [expression, want] : cases) {
    absl::StatusOr<std::string> got = evaluate_arithmetic(expression);
    ASSERT_TRUE(got.ok()) << expression << ": " << got.status();
    EXPECT_EQ(*got, want) << expression;
  }
}

TEST(ArithmeticTest, RefusesWhatItCannotEvaluateNamingWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1/0", "division by zero at offset 1"},
      {"5 % 0", "modulo by zero"},
      {"1.5 % 1", "% needs integers"},
      {"2^0.5", "the exponent must be an integer"},
      {"2^1000", "the exponent is too large"},
      {"2^200", "result too large"},
      {"(1+2", "missing ')'"},
      {"1+", "ends too early"},
      {"3 4", "unexpected '4' at offset 2"},
      {"import os", "unexpected 'i' at offset 0"},
      {"1e3", "unexpected 'e' at offset 1"},
      {"", "empty"},
      {std::string(300, '1'), "longer than 200 characters"},
      {std::string(40, '(') + "1" + std::string(40, ')'), "nested too deeply"},
      {std::string(37, '9'), "over 36 digits"},
  };
  for (const auto& [expression, want] : cases) {
    absl::StatusOr<std::string> got = evaluate_arithmetic(expression);
    ASSERT_FALSE(got.ok()) << expression << " = " << *got;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(want)) << expression;
  }
}

// The built-ins, made through the registry as the runner makes them.
std::unique_ptr<Environment> make(const std::string& name,
                                  const std::map<std::string, std::string>& params = {}) {
  core::PluginRegistry registry;
  EXPECT_TRUE(register_rollout_builtins(registry).ok());
  auto& environments = registry.get<Environment, const EnvironmentSpec&>();
  absl::StatusOr<std::unique_ptr<Environment>> env = environments.create(name, {name, params, ""});
  EXPECT_TRUE(env.ok()) << env.status();
  return env.ok() ? std::move(*env) : nullptr;
}

ModelTurn turn(int64_t index, const std::string& text, bool truncated = false) {
  ModelTurn t;
  t.index = index;
  t.text = text;
  t.truncated = truncated;
  return t;
}

TEST(CalculatorEnvironmentTest, AnswersACallAndEndsOnTheAnswer) {
  std::unique_ptr<Environment> env = make("calculator");
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(env->turn_stop_strings(), std::vector<std::string>{"</calc>"});
  absl::StatusOr<EpisodeStart> start = env->reset(core::Json::object());
  ASSERT_TRUE(start.ok());
  EXPECT_TRUE(start->observation.empty());

  absl::StatusOr<EnvironmentStep> call =
      env->step(start->state.get(), turn(0, "<calc>123*45</calc>"));
  ASSERT_TRUE(call.ok());
  EXPECT_FALSE(call->done);
  EXPECT_TRUE(call->tool_call);
  EXPECT_EQ(call->observation.text, "<result>5535</result>");

  absl::StatusOr<EnvironmentStep> bad =
      env->step(start->state.get(), turn(1, "so <calc>1/0</calc>"));
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->done);
  EXPECT_EQ(bad->observation.text, "<error>division by zero at offset 1</error>");
  EXPECT_EQ(bad->info.at("calc_errors"), 1);

  for (const ModelTurn& answer : {turn(2, "5535"), turn(2, "<calc>1+", /*truncated=*/true),
                                  turn(2, "</calc><calc>"), turn(2, "<calc>1</calc> = 1")}) {
    absl::StatusOr<EnvironmentStep> last = env->step(start->state.get(), answer);
    ASSERT_TRUE(last.ok());
    EXPECT_TRUE(last->done) << answer.text;
    EXPECT_FALSE(last->tool_call) << answer.text;
    EXPECT_TRUE(last->observation.empty()) << answer.text;
  }
}

TEST(CalculatorEnvironmentTest, BadParamsAreNamed) {
  core::PluginRegistry registry;
  ASSERT_TRUE(register_rollout_builtins(registry).ok());
  auto& environments = registry.get<Environment, const EnvironmentSpec&>();
  auto env = environments.create("calculator", {"calculator", {{"max_chars", "5"}}, ""});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("environment 'calculator': unknown option 'max_chars'"));
  auto unknown = environments.create("calculater", {"calculater", {}, ""});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("calculator"));
}

TEST(GuessNumberEnvironmentTest, PlaysTheRecordsNumber) {
  std::unique_ptr<Environment> env =
      make("guess_number", {{"max", "100"}, {"turn_penalty", "0.25"}});
  ASSERT_NE(env, nullptr);
  core::Json record = core::Json::object();
  record.set("target", core::Json(int64_t{37}));
  absl::StatusOr<EpisodeStart> start = env->reset(record);
  ASSERT_TRUE(start.ok());
  EpisodeState* state = start->state.get();
  const std::vector<std::pair<std::string, std::string>> script = {
      {"50", "lower"}, {"I guess 25", "higher"}, {"no idea", "guess an integer from 1 to 100"}};
  for (size_t i = 0; i < script.size(); ++i) {
    absl::StatusOr<EnvironmentStep> s =
        env->step(state, turn(static_cast<int64_t>(i), script[i].first));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->observation.text, script[i].second);
    EXPECT_FALSE(s->done);
    EXPECT_EQ(s->reward, 0);
  }
  absl::StatusOr<EnvironmentStep> found = env->step(state, turn(3, "37"));
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->done);
  EXPECT_EQ(found->observation.text, "correct");
  EXPECT_DOUBLE_EQ(found->reward, 1.0 - 3 * 0.25);  // three turns before it
}

TEST(GuessNumberEnvironmentTest, WithoutATargetTheRecordPicksOneNumberForTheGroup) {
  std::unique_ptr<Environment> env = make("guess_number", {{"max", "10"}});
  ASSERT_NE(env, nullptr);
  core::Json record = core::Json::object();
  record.set("prompt", core::Json("guess"));
  // Every episode of the record hides the same number: binary search finds it in <= 4 turns.
  std::vector<int64_t> found;
  for (int episode = 0; episode < 3; ++episode) {
    absl::StatusOr<EpisodeStart> start = env->reset(record);
    ASSERT_TRUE(start.ok());
    int64_t lo = 1, hi = 10;
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t guess = (lo + hi) / 2;
      absl::StatusOr<EnvironmentStep> s =
          env->step(start->state.get(), turn(t, std::to_string(guess)));
      ASSERT_TRUE(s.ok());
      if (s->done) {
        found.push_back(guess);
        break;
      }
      if (s->observation.text == "higher") {
        lo = guess + 1;
      } else {
        hi = guess - 1;
      }
    }
  }
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0], found[1]);
  EXPECT_EQ(found[1], found[2]);

  core::Json bad = core::Json::object();
  bad.set("target", core::Json(int64_t{11}));
  absl::StatusOr<EpisodeStart> refused = env->reset(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("'target' must be an integer in [1, 10]"));
}

}  // namespace
}  // namespace flywheel::rollout
