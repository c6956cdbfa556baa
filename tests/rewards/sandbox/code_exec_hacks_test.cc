// Reward hacks against code_exec (issue 26, items 3-5): each scores 0 where an honest solution
// scores 1. Before the harness (python_harness.h) and the empty root, sys.exit(0), os._exit(0),
// raise SystemExit, an always-equal object, reading the tests from the solution's own file and
// reading the dataset each scored 1; nothing bounded memfd pages; a slow correct solution
// scored the fallback past the scoring deadline.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "builtin_factories.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rewards/scoring_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/sandbox.h"
#include "sandbox_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

constexpr char kAssertTests[] = R"({"tests": ["assert add(2, 2) == 4", "assert add(1, 5) == 6"]})";

std::unique_ptr<RewardFunction> make(std::map<std::string, std::string> params = {},
                                     double call_timeout_s = 0) {
  RewardSpec spec;
  spec.name = "code_exec";
  spec.params = std::move(params);
  spec.call_timeout_s = call_timeout_s;
  RewardPtr reward = make_code_exec_reward(spec);
  EXPECT_TRUE(reward.ok()) << reward.status();
  return reward.ok() ? *std::move(reward) : nullptr;
}

double score(const RewardFunction& reward, const std::string& code,
             const std::string& record_json = kAssertTests) {
  absl::StatusOr<core::Json> record = core::Json::parse(record_json);
  EXPECT_TRUE(record.ok()) << record.status();
  RewardInput input;
  input.record = &*record;
  input.record_name = "hack";
  const std::string completion = "```python\n" + code + "\n```";
  input.completion = completion;
  absl::StatusOr<RewardOutput> out = reward.score(input);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->score : -1;
}

class CodeExecHackTest : public ::testing::Test {
 protected:
  void SetUp() override { reward_ = make({{"timeout_s", "3"}}); }
  std::unique_ptr<RewardFunction> reward_;
};

TEST_F(CodeExecHackTest, AnHonestSolutionScoresOne) {
  EXPECT_EQ(score(*reward_, "def add(a, b):\n    return a + b"), 1);
  // With an unrelated exit after defining it (the harness goes on with what was defined).
  EXPECT_EQ(score(*reward_, "def add(a, b):\n    return a + b\nimport sys\nsys.exit(0)"), 1);
}

TEST_F(CodeExecHackTest, ExitingEarlyPassesNothing) {
  EXPECT_EQ(score(*reward_, "import sys\nsys.exit(0)"), 0);
  EXPECT_EQ(score(*reward_, "import os\nos._exit(0)"), 0);
  EXPECT_EQ(score(*reward_, "raise SystemExit"), 0);
  EXPECT_EQ(score(*reward_, "def add(a, b):\n    import os\n    os._exit(0)"), 0);
  EXPECT_EQ(score(*reward_, "def add(a, b):\n    raise SystemExit(0)"), 0);
}

TEST_F(CodeExecHackTest, AnAlwaysEqualObjectIsNotPlainData) {
  EXPECT_EQ(score(*reward_,
                  "class Always:\n"
                  "    def __eq__(self, other): return True\n"
                  "    def __ne__(self, other): return False\n"
                  "    def __hash__(self): return 0\n"
                  "def add(a, b):\n    return Always()"),
            0);
  // A subclass of int that equals everything is not an int.
  EXPECT_EQ(score(*reward_,
                  "class Int(int):\n"
                  "    def __eq__(self, other): return True\n"
                  "def add(a, b):\n    return Int(0)"),
            0);
  // Nor inside a container.
  EXPECT_EQ(score(*reward_,
                  "class Always:\n    def __eq__(self, other): return True\n"
                  "def add(a, b):\n    return [Always()]",
                  R"({"tests": ["assert add(1, 1) == [2]"]})"),
            0);
}

// What the solution can reach (its source, the harness, every frame, string and object of its
// process) holds no expected value: looking for "add(2, 2) == N" anywhere finds nothing.
TEST_F(CodeExecHackTest, TheTestsAreNotInTheSolutionsReach) {
  const std::string search =
      "import gc, re, sys, os\n"
      "def find(a, b):\n"
      "    pat = re.compile(r'add\\(%d, %d\\) == (\\d+)' % (a, b))\n"
      "    texts = []\n"
      "    for o in gc.get_objects():\n"
      "        if isinstance(o, dict): texts += [v for v in o.values() if isinstance(v, str)]\n"
      "        if isinstance(o, (list, tuple)): texts += [v for v in o if isinstance(v, str)]\n"
      "    f = sys._getframe()\n"
      "    while f:\n"
      "        texts += [v for v in f.f_locals.values() if isinstance(v, str)]\n"
      "        texts += [v for v in f.f_globals.values() if isinstance(v, str)]\n"
      "        f = f.f_back\n"
      "    for name in ['harness.py', 'solution.py', globals().get('__file__', 'x')]:\n"
      "        try: texts.append(open(name).read())\n"
      "        except Exception: pass\n"
      "    for path in ['/proc/self/cmdline', '/proc/self/environ', '/proc/%d/cmdline' % "
      "os.getppid()]:\n"
      "        try: texts.append(open(path, errors='replace').read())\n"
      "        except Exception: pass\n"
      "    for t in texts:\n"
      "        m = pat.search(t)\n"
      "        if m: return int(m.group(1))\n"
      "    return -1\n"
      "def add(a, b):\n    return find(a, b)";
  // The expected values differ from a + b, so only reading them could pass.
  EXPECT_EQ(
      score(*reward_, search, R"({"tests": ["assert add(2, 2) == 5", "assert add(1, 5) == 7"]})"),
      0);
}

// The sandbox's root is empty but for the interpreter: the dataset, the run directory and any
// other host file cannot be read, so an expected output stored there is out of reach.
TEST_F(CodeExecHackTest, TheDatasetAndTheRunDirectoryDoNotExistInTheSandbox) {
  const std::filesystem::path run_dir =
      std::filesystem::absolute("code-exec-hack-" + unique_marker());
  std::filesystem::create_directories(run_dir / "data");
  const std::string dataset = (run_dir / "data" / "train.jsonl").string();
  std::ofstream(dataset) << R"({"prompt": "add", "tests": [{"input": "2 2", "output": "Q4"}]})"
                         << "\n";
  const std::string token = (run_dir / "token").string();
  std::ofstream(token) << "Q4\n";
  const std::string record = R"({"tests": [{"input": "2 2", "output": "Q4"}]})";
  const std::string reader =
      "import json\n"
      "for path in ['" +
      dataset + "', '" + token +
      "']:\n"
      "    try:\n"
      "        text = open(path).read()\n"
      "        print(json.loads(text)['tests'][0]['output'] if text.startswith('{') else text)\n"
      "        break\n"
      "    except Exception: pass\n";
  EXPECT_EQ(score(*reward_, reader, record), 0);
  EXPECT_EQ(score(*reward_,
                  "import os\nprint(os.path.exists('" + dataset +
                      "'), "
                      "os.path.exists('/work'), os.path.exists('/root'))",
                  R"({"tests": [{"input": "", "output": "True True True"}]})"),
            0);
  EXPECT_EQ(score(*reward_, "print('Q' + str(sum(map(int, input().split()))))", record), 1);
  std::error_code ignored;
  std::filesystem::remove_all(run_dir, ignored);
}

// Result lines need the harness's nonce, which the solution never sees; guessing or reading it
// from its parent fails.
TEST_F(CodeExecHackTest, APrintedGuessOfTheNonceIsIgnored) {
  const std::string forger =
      "import os, sys\n"
      "guesses = ['0' * 32, 'f' * 32, '']\n"
      "for path in ['/proc/%d/fd/0' % os.getppid(), '/proc/%d/mem' % os.getppid()]:\n"
      "    try: guesses.append(open(path, 'rb').read(64).decode(errors='replace')[-32:])\n"
      "    except Exception: pass\n"
      "out = os.fdopen(os.dup(2), 'w')\n"
      "for fd in (1, 2):\n"
      "    for g in guesses:\n"
      "        line = '%s 0 [\"ok\", [[\"i\", \"4\"]]]\\n%s 1 [\"ok\", [[\"i\", \"6\"]]]\\n%s "
      "end\\n' % (g, g, g)\n"
      "        try: os.write(fd, line.encode())\n"
      "        except Exception: pass\n"
      "try: os.write(3, b'0 [\"ok\", [[\"i\", \"4\"]]]\\n')\n"
      "except Exception: pass\n"
      "def add(a, b):\n    return 0";
  EXPECT_EQ(score(*reward_, forger), 0);
}

// Item 4: memfd pages count against no rlimit (only each one's size, RLIMIT_FSIZE); without a
// cgroup they are refused, with one the whole run is bounded. Four processes filling twelve
// 8 MiB memfds each would hold 384 MiB.
TEST(CodeExecMemoryTest, ForkedMemfdFillersCannotHoldMoreThanTheRunsBudget) {
  const std::string filler =
      "import os, sys\n"
      "for _ in range(2): os.fork()\n"
      "fds = []\n"
      "try:\n"
      "    for _ in range(12):\n"  // 12 x 8 MiB: each memfd under RLIMIT_FSIZE
      "        fds.append(os.memfd_create('x'))\n"
      "        for _ in range(8): os.write(fds[-1], b'x' * (1 << 20))\n"
      "    print('filled', flush=True)\n"
      "except OSError as e:\n"
      "    print('refused', e.errno, flush=True)\n"
      "import time; time.sleep(0.2)\n";
  for (bool cgroups : {false, true}) {
    SandboxOptions options;
    options.memory_bytes = int64_t{512} << 20;
    options.total_memory_bytes = int64_t{192} << 20;
    options.cgroups = cgroups;
    absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Sandbox::create(options);
    if (cgroups && !sandbox.ok()) {
      std::printf("  no cgroups here (%s): the cgroup mode is not exercised\n",
                  std::string(sandbox.status().message()).c_str());
      continue;
    }
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    SandboxRequest request;
    request.argv = {kPython, "-I", "-c", filler};
    absl::StatusOr<SandboxResult> result = (*sandbox)->run(request);
    ASSERT_TRUE(result.ok()) << result.status();
    int filled = 0;
    for (size_t at = result->stdout_data.find("filled"); at != std::string::npos;
         at = result->stdout_data.find("filled", at + 1)) {
      ++filled;
    }
    std::printf("  %s: %d of 4 filled, peak %lld bytes, oom_killed %d\n",
                (*sandbox)->isolation().c_str(), filled,
                static_cast<long long>(result->memory_peak_bytes), result->oom_killed);
    EXPECT_LT(filled, 2) << result->stdout_data;
    if (!cgroups) {
      EXPECT_THAT(result->stdout_data, HasSubstr("refused 1"));  // EPERM
    } else {
      EXPECT_TRUE(result->oom_killed);
      EXPECT_LE(result->memory_peak_bytes, (int64_t{192} << 20) + (int64_t{8} << 20));
    }
  }
}

// Item 5: a correct but slow solution. 3 tests of 0.8 s each do not fit a 1.5 s scoring
// deadline: code_exec stops between tests and returns its own score in time (the pool counts no
// timeout), and leaves nothing running. A per-test timeout_s the deadline cannot hold is an
// error when the reward is made.
TEST(CodeExecDeadlineTest, StopsBetweenTestsBeforeTheScoringDeadline) {
  RewardSpec bad;
  bad.name = "code_exec";
  bad.params = {{"timeout_s", "2"}};
  bad.call_timeout_s = 1.5;
  absl::StatusOr<std::unique_ptr<RewardFunction>> refused = make_code_exec_reward(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("rewards.timeout_s (1.5 s"));

  std::shared_ptr<RewardFunction> slow = make({{"timeout_s", "1"}}, /*call_timeout_s=*/1.5);
  ASSERT_NE(slow, nullptr);
  auto composite = std::make_shared<const CompositeReward>(
      std::vector<WeightedReward>{{"code", 1.0, slow}}, /*fallback_score=*/-1.0);
  auto pool = ScoringPool::create(composite, {1, 16, 1.5});
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::string marker = unique_marker();
  OwnedSample sample;
  sample.record = std::make_shared<const core::Json>(*core::Json::parse(
      R"({"tests": [{"input": "1", "output": "1"}, {"input": "2", "output": "2"},)"
      R"( {"input": "3", "output": "3"}]})"));
  sample.completion = "```python\n" +
                      marked_python(marker,
                                    "import time\ntime.sleep(0.8)\n"
                                    "print(input())") +
                      "\n```";
  std::vector<ScoredSample> scored = (*pool)->score({sample});
  ASSERT_EQ(scored.size(), 1u);
  EXPECT_EQ((*pool)->counters().timeouts, 0);
  EXPECT_NEAR(scored[0].reward, 1.0 / 3, 1e-9);  // the first test; then the deadline
  EXPECT_EQ(scored[0].parts.at("code/deadline_stops"), 1);
  EXPECT_TRUE(processes_with_marker(marker).empty()) << "a sandbox outlived the call";
}

}  // namespace
}  // namespace flywheel::rewards
