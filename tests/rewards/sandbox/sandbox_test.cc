#include "sandbox/sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::unique_ptr<Sandbox> make_sandbox(SandboxOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Sandbox::create(options);
  EXPECT_TRUE(sandbox.ok()) << sandbox.status();
  return sandbox.ok() ? *std::move(sandbox) : nullptr;
}

SandboxResult run_python(const Sandbox& sandbox, const std::string& code,
                         const std::string& stdin_data = "") {
  SandboxRequest request;
  request.argv = {kPython, "-I", "-B", "main.py"};
  request.files = {{"main.py", code}};
  request.stdin_data = stdin_data;
  absl::StatusOr<SandboxResult> result = sandbox.run(request);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SandboxResult{};
}

TEST(SandboxTest, RunsAProgramWithStdinAndCapturesItsOutput) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  SandboxResult r = run_python(*sandbox,
                               "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
                               "print('warn', file=sys.stderr)\n",
                               "1 2 39\n");
  EXPECT_TRUE(r.success());
  EXPECT_EQ(r.stdout_data, "42\n");
  EXPECT_EQ(r.stderr_data, "warn\n");
  EXPECT_FALSE(r.timed_out);
  EXPECT_GT(r.elapsed_s, 0);
}

TEST(SandboxTest, ReportsExitCodesAndSignals) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  SandboxResult exited = run_python(*sandbox, "raise SystemExit(3)");
  EXPECT_EQ(exited.exit_code, 3);
  EXPECT_EQ(exited.signal, 0);
  EXPECT_FALSE(exited.success());
  SandboxResult killed = run_python(*sandbox, "import os, signal\nos.kill(os.getpid(), 11)\n");
  EXPECT_EQ(killed.signal, SIGSEGV);
  EXPECT_EQ(killed.exit_code, -1);
}

TEST(SandboxTest, EnvironmentHoldsNothingOfTheParent) {
  setenv("FLYWHEEL_SANDBOX_SECRET", "hunter2", 1);
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  SandboxResult r =
      run_python(*sandbox, "import os\nprint(sorted(os.environ.items()))\nprint(os.getcwd())\n");
  unsetenv("FLYWHEEL_SANDBOX_SECRET");
  EXPECT_THAT(r.stdout_data, Not(HasSubstr("hunter2")));
  EXPECT_THAT(r.stdout_data, HasSubstr("('LANG', 'C.UTF-8'), ('PATH', '/usr/bin:/bin')"));
  EXPECT_THAT(r.stdout_data, HasSubstr("('HOME', '/tmp/flywheel-sbx-"));
}

TEST(SandboxTest, GivesAPrivateWorkdirThatIsRemovedAfterwards) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  SandboxRequest request;
  request.argv = {kPython, "-I", "-B", "main.py"};
  request.files = {{"main.py",
                    "import os\nopen('result.txt', 'w').write(open('data.txt').read() * 2)\n"
                    "print(os.getcwd())\n"},
                   {"data.txt", "ab"}};
  request.output_files = {"result.txt", "absent.txt"};
  absl::StatusOr<SandboxResult> r = sandbox->run(request);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->success()) << r->stderr_data;
  EXPECT_EQ(r->output_files.at("result.txt"), "abab");
  EXPECT_EQ(r->output_files.count("absent.txt"), 0u);
  const std::string workdir(absl::StripAsciiWhitespace(r->stdout_data));
  EXPECT_THAT(workdir, HasSubstr("/tmp/flywheel-sbx-"));
  EXPECT_FALSE(std::filesystem::exists(workdir)) << workdir;
}

TEST(SandboxTest, RefusesBadRequests) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  const std::vector<SandboxRequest> bad = {
      {},
      {{"python3"}, "", {}, {}},
      {{kPython}, "", {{"../x", ""}}, {}},
      {{kPython}, "", {}, {"a/b"}},
  };
  for (const SandboxRequest& request : bad) {
    EXPECT_EQ(sandbox->run(request).status().code(), absl::StatusCode::kInvalidArgument);
  }
  SandboxRequest missing;
  missing.argv = {"/nonexistent/interpreter"};
  absl::StatusOr<SandboxResult> r = sandbox->run(missing);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("executing the program"));
}

TEST(SandboxTest, KeepsReadingPastTheOutputCapWithoutHoldingIt) {
  SandboxOptions options;
  options.max_stdout_bytes = 1000;
  options.wall_timeout_s = 20;
  auto sandbox = make_sandbox(options);
  ASSERT_NE(sandbox, nullptr);
  // 1 GiB to stdout: the run must neither block on a full pipe nor keep it in memory.
  SandboxResult r = run_python(
      *sandbox,
      "import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(b)\n"
      "print('done', file=sys.stderr)\n");
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_FALSE(r.stderr_truncated);
  EXPECT_EQ(r.stdout_data.size(), 1000u);
  EXPECT_EQ(r.stderr_data, "done\n");
}

TEST(SandboxTest, WallClockKillsAtTheOutputCapWhenAsked) {
  SandboxOptions options;
  options.max_stdout_bytes = 1000;
  options.kill_on_stdout_overflow = true;
  auto sandbox = make_sandbox(options);
  ASSERT_NE(sandbox, nullptr);
  SandboxResult r = run_python(*sandbox, "while True: print('x' * 1000)\n");
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.elapsed_s, 2.0);
}

TEST(SandboxTest, DiscardsStderrPastItsCapWithoutKilling) {
  SandboxOptions options;
  options.max_stderr_bytes = 100;
  options.kill_on_stdout_overflow = true;
  auto sandbox = make_sandbox(options);
  ASSERT_NE(sandbox, nullptr);
  SandboxResult r =
      run_python(*sandbox, "import sys\nsys.stderr.write('e' * 200000)\nprint('ok')\n");
  EXPECT_TRUE(r.success());
  EXPECT_EQ(r.stdout_data, "ok\n");
  EXPECT_TRUE(r.stderr_truncated);
  EXPECT_EQ(r.stderr_data.size(), 100u);
}

TEST(SandboxTest, StdinIsReadOnly) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  SandboxResult r = run_python(*sandbox,
                               "import os\ntry:\n    os.write(0, b'x')\n    print('wrote')\n"
                               "except OSError as e:\n    print(e.errno)\n",
                               "input");
  EXPECT_EQ(r.stdout_data, "9\n");  // EBADF
}

TEST(SandboxTest, RunsConcurrentlyFromManyThreads) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  std::atomic<int> correct{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        SandboxRequest request;
        request.argv = {kPython, "-I", "-c", "import sys; print(int(sys.stdin.read()) * 2)"};
        request.stdin_data = std::to_string(t * 100 + i);
        absl::StatusOr<SandboxResult> r = sandbox->run(request);
        if (r.ok() && r->stdout_data == std::to_string(2 * (t * 100 + i)) + "\n") ++correct;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(correct.load(), 18);
}

TEST(SandboxTest, NamesAMissingLauncher) {
  setenv("FLYWHEEL_SANDBOX_INIT", "/nonexistent/flywheel_sandbox_init", 1);
  absl::StatusOr<std::unique_ptr<Sandbox>> missing = Sandbox::create(SandboxOptions{});
  unsetenv("FLYWHEEL_SANDBOX_INIT");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent/flywheel_sandbox_init is missing"));
}

TEST(SandboxTest, RunsWhenTheCallerIgnoresSigchldAndSigpipe) {
  auto sandbox = make_sandbox(SandboxOptions{});
  ASSERT_NE(sandbox, nullptr);
  struct sigaction ignore = {}, old_chld = {}, old_pipe = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &old_chld);
  sigaction(SIGPIPE, &ignore, &old_pipe);
  SandboxResult r = run_python(*sandbox, "print(6 * 7)\n");
  sigaction(SIGCHLD, &old_chld, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "42\n");
}

TEST(SandboxTest, RefusesToRunWithoutNamespacesUnlessAllowed) {
  SandboxOptions options;
  options.simulate_namespace_refusal = true;
  absl::StatusOr<std::unique_ptr<Sandbox>> refused = Sandbox::create(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("allow_network_fallback"));

  options.allow_network_fallback = true;
  auto sandbox = make_sandbox(options);
  ASSERT_NE(sandbox, nullptr);
  EXPECT_THAT(sandbox->isolation(), HasSubstr("no namespaces"));
  SandboxResult r = run_python(*sandbox, "import os\nprint(os.getuid() != 0)\n");
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "True\n");  // root or not, never root
}

TEST(SandboxTest, UsesNamespacesHere) {
  auto sandbox = make_sandbox();
  ASSERT_NE(sandbox, nullptr);
  EXPECT_THAT(sandbox->isolation(), HasSubstr("+net"));
  SandboxResult r = run_python(*sandbox, "import os\nprint(os.getpid(), os.getppid())\n");
  EXPECT_EQ(r.stdout_data, "2 1\n");  // pid 2 under the sandbox's init
}

}  // namespace
}  // namespace flywheel::rewards
