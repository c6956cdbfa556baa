#include "sandbox/code_exec_reward.h"

#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "builtin_factories.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<RewardFunction> make_reward(std::map<std::string, std::string> params = {}) {
  RewardSpec spec;
  spec.name = "code_exec";
  spec.params = std::move(params);
  RewardPtr reward = make_code_exec_reward(spec);
  EXPECT_TRUE(reward.ok()) << reward.status();
  return reward.ok() ? *std::move(reward) : nullptr;
}

absl::StatusOr<RewardOutput> score(const RewardFunction& reward, const std::string& completion,
                                   const std::string& record_json) {
  absl::StatusOr<core::Json> record = core::Json::parse(record_json);
  EXPECT_TRUE(record.ok()) << record.status();
  RewardInput input;
  input.record = &*record;
  input.record_name = "line 7";
  input.completion = completion;
  return reward.score(input);
}

std::string python_block(const std::string& code) { return "```python\n" + code + "\n```\n"; }

constexpr char kAddTests[] =
    R"({"tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5", "output": "10"}]})";
constexpr char kAddCode[] = "a, b = map(int, input().split())\nprint(a + b)";

TEST(CodeExecRewardTest, ScoresTheFractionOfTestsPassed) {
  struct Case {
    std::string name;
    std::string completion;
    std::string record;
    double score;
    double has_code;
  };
  const std::string mb_line(1 << 20, 'x');
  const std::vector<Case> cases = {
      {"correct stdin/stdout", "Here:\n" + python_block(kAddCode), kAddTests, 1, 1},
      {"wrong", python_block("a, b = map(int, input().split())\nprint(a - b)"), kAddTests, 0, 1},
      {"partial: one of two", python_block("a, b = map(int, input().split())\nprint(3)"), kAddTests,
       0.5, 1},
      {"trailing spaces and blank lines are ignored",
       python_block("a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\nprint()"),
       kAddTests, 1, 1},
      {"leading spaces are not ignored",
       python_block("a, b = map(int, input().split())\nprint(' ' + str(a + b))"), kAddTests, 0, 1},
      {"right output but a crash fails",
       python_block("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)"),
       kAddTests, 0, 1},
      {"assertion tests, one of two", python_block("def add(a, b):\n    return a + b"),
       R"({"tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]})", 0.5, 1},
      {"assertion and stdin tests mixed",
       python_block("import sys\ndef add(a, b):\n    return a + b\n"
                    "data = sys.stdin.read().split()\nif data: print(add(*map(int, data)))"),
       R"({"tests": ["assert add(1, 2) == 3", {"input": "4 4", "output": "8"}]})", 1, 1},
      {"syntax error", python_block("def f(:\n    pass"), kAddTests, 0, 1},
      {"no code block", "The answer is 3.", kAddTests, 0, 0},
      {"empty code block", "```python\n\n```", kAddTests, 0, 0},
      {"code block left open (truncated)", "```python\n" + std::string(kAddCode), kAddTests, 0, 0},
      {"the last block wins (wrong)", python_block(kAddCode) + "or\n" + python_block("print(0)"),
       kAddTests, 0, 1},
      {"the last block wins (right)", python_block("print(0)") + "or\n" + python_block(kAddCode),
       kAddTests, 1, 1},
      {"an untagged block counts", "```\n" + std::string(kAddCode) + "\n```", kAddTests, 1, 1},
      {"a block in another language is skipped",
       python_block(kAddCode) + "Run it:\n```bash\npython3 main.py\n```\n", kAddTests, 1, 1},
      {"``py`` tag and a longer fence", "````py\n" + std::string(kAddCode) + "\n````", kAddTests, 1,
       1},
      {"tests as a JSON string", python_block(kAddCode),
       R"({"tests": "[{\"input\": \"2 2\", \"output\": \"4\"}]"})", 1, 1},
      {"APPS-style inputs/outputs", python_block(kAddCode),
       R"({"tests": {"inputs": ["1 1\n", "2 3\n"], "outputs": ["2\n", "6\n"]}})", 0.5, 1},
      {"NUL bytes and invalid UTF-8 in the code",
       python_block(std::string("print(1)\0\xff\xfe", 11)), kAddTests, 0, 1},
      {"a megabyte-long line outside the block", mb_line + "\n" + python_block(kAddCode), kAddTests,
       1, 1},
      {"a megabyte-long line inside the block",
       python_block("# " + mb_line + "\n" + std::string(kAddCode)), kAddTests, 1, 1},
  };
  auto reward = make_reward();
  ASSERT_NE(reward, nullptr);
  for (const Case& c : cases) {
    absl::StatusOr<RewardOutput> out = score(*reward, c.completion, c.record);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    EXPECT_DOUBLE_EQ(out->score, c.score) << c.name;
    EXPECT_DOUBLE_EQ(out->components.at("passed"), c.score) << c.name;
    EXPECT_DOUBLE_EQ(out->components.at("has_code"), c.has_code) << c.name;
  }
}

TEST(CodeExecRewardTest, WallClockCountsTimeoutsAndStopsEarlyWhenAsked) {
  auto reward = make_reward({{"timeout_s", "0.5"}, {"stop_on_first_failure", "true"}});
  ASSERT_NE(reward, nullptr);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<RewardOutput> out =
      score(*reward, python_block("import time\ntime.sleep(10)"),
            R"({"tests": [{"input": "", "output": "1"}, {"input": "", "output": "2"}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->score, 0);
  EXPECT_DOUBLE_EQ(out->components.at("timeouts"), 0.5);  // the second test never ran
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3);
}

TEST(CodeExecRewardTest, CompilesAndRunsCpp) {
  if (access("/usr/bin/g++", X_OK) != 0) GTEST_SKIP() << "no g++";
  struct Case {
    std::string name;
    std::string completion;
    double score;
    double compiled;
  };
  const std::string add =
      "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << "
      "\"\\n\"; }";
  const std::vector<Case> cases = {
      {"correct", "```cpp\n" + add + "\n```", 1, 1},
      {"c++ tag", "```c++\n" + add + "\n```", 1, 1},
      {"compile error", "```cpp\nint main() { return x; }\n```", 0, 0},
      {"wrong", "```cpp\nint main() { return 0; }\n```", 0, 1},
      {"python block ignored", "```python\nprint(3)\n```", 0, 0},
  };
  auto reward = make_reward({{"language", "cpp"}});
  ASSERT_NE(reward, nullptr);
  for (const Case& c : cases) {
    absl::StatusOr<RewardOutput> out = score(*reward, c.completion, kAddTests);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    EXPECT_DOUBLE_EQ(out->score, c.score) << c.name;
    EXPECT_DOUBLE_EQ(out->components.at("compiled"), c.compiled) << c.name;
  }
  absl::StatusOr<RewardOutput> assertion =
      score(*reward, "```cpp\n" + add + "\n```", R"({"tests": ["assert True"]})");
  EXPECT_EQ(assertion.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodeExecRewardTest, RejectsBadOptionsNamingThem) {
  struct Case {
    std::map<std::string, std::string> params;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"timeout", "3"}}, "did you mean 'timeout_s'?"},
      {{{"zzz", "1"}}, "unknown option 'zzz'"},
      {{{"language", "rust"}}, "must be one of python, cpp"},
      {{{"timeout_s", "0"}}, "option 'timeout_s'"},
      {{{"memory_mb", "lots"}}, "must be an integer"},
      {{{"python", "python3"}}, "option 'python' is 'python3'"},
      {{{"language", "cpp"}, {"cxx", "no-such-compiler-xyz"}}, "option 'cxx'"},
  };
  for (const Case& c : cases) {
    RewardSpec spec;
    spec.name = "code_exec";
    spec.params = c.params;
    RewardPtr reward = make_code_exec_reward(spec);
    ASSERT_FALSE(reward.ok()) << c.error;
    EXPECT_EQ(reward.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(reward.status().message()), HasSubstr(c.error));
  }
}

TEST(CodeExecRewardTest, RecordsWithoutUsableTestsAreErrorsNamingRecordAndKey) {
  auto reward = make_reward({{"tests_key", "cases"}});
  ASSERT_NE(reward, nullptr);
  struct Case {
    std::string record;
    std::string error;
  };
  const std::vector<Case> cases = {
      {R"({"tests": []})", "line 7: reward 'code_exec' needs the key 'cases' in the record"},
      {R"({"cases": 3})", "line 7: reward 'code_exec': record['cases'] is a number"},
      {R"({"cases": []})", "holds no tests"},
      {R"({"cases": [{"input": "1"}]})", "test 0 is neither"},
      {R"({"cases": "not json"})", "is a string but not JSON"},
      {R"({"cases": {"inputs": ["1"], "outputs": []}})", "of one length"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RewardOutput> out = score(*reward, python_block("print(1)"), c.record);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.record;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.error));
  }
}

TEST(ExtractLastCodeBlockTest, FindsTheLastBlockInAWantedLanguage) {
  struct Case {
    std::string text;
    std::optional<std::string> code;
  };
  const std::vector<std::string> python = {"python", "py", ""};
  const std::vector<Case> cases = {
      {"no fence", std::nullopt},
      {"```python\na\n```", "a\n"},
      {"```Python3 extra\na\n```", std::nullopt},  // python3 not in this list
      {"```PY\na\nb\n```", "a\nb\n"},
      {"  ```python\n  a\n  ```", "  a\n"},
      {"```python\na\n```\n```python\nb\n```", "b\n"},
      {"```python\na\n```\n```text\nb\n```", "a\n"},
      {"```\na\n```", "a\n"},
      {"```python\na\n", std::nullopt},
      {"````python\n```\ninner\n```\n````", "```\ninner\n```\n"},
      {"```python\n```", ""},
      {"text ```python\na\n```", std::nullopt},  // an opening fence starts its line
      {"```python\r\na\r\n```\r\n", "a\r\n"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(extract_last_code_block(c.text, python), c.code) << c.text;
  }
}

TEST(OutputsMatchTest, IgnoresTrailingWhitespaceOnly) {
  struct Case {
    std::string actual;
    std::string expected;
    bool match;
  };
  const std::vector<Case> cases = {
      {"1\n2\n", "1\n2", true},
      {"1 \n2\t\n\n\n", "1\n2", true},
      {"1\r\n2\r\n", "1\n2\n", true},
      {" 1\n", "1\n", false},
      {"1\n\n2", "1\n2", false},
      {"", "", true},
      {"\n\n", "", true},
      {"12", "1 2", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(outputs_match(c.actual, c.expected), c.match)
        << "'" << c.actual << "' vs '" << c.expected << "'";
  }
}

}  // namespace
}  // namespace flywheel::rewards
