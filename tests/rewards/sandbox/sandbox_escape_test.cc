// Programs that try to break out of the code_exec sandbox. Each must be contained and scored 0
// without harming the host; afterwards no process of it may be left, no file it tried to write
// outside its working directory may exist, and its sandbox directory must be gone.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "builtin_factories.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/sandbox.h"
#include "sandbox_test_util.h"

namespace flywheel::rewards {
namespace {

using ::testing::IsEmpty;

constexpr double kTimeoutS = 1.5;

class SandboxEscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RewardSpec spec;
    spec.name = "code_exec";
    spec.params = {{"timeout_s", absl::StrCat(kTimeoutS)}, {"max_output_kb", "64"}};
    RewardPtr reward = make_code_exec_reward(spec);
    ASSERT_TRUE(reward.ok()) << reward.status();
    reward_ = *std::move(reward);
    marker_ = unique_marker();
    dirs_before_ = sandbox_dirs();
    // A world-writable directory of the test's own: only the sandbox can keep the program out.
    test_dir_ = std::filesystem::current_path() / ("escape-" + marker_);
    std::filesystem::create_directory(test_dir_);
    chmod(test_dir_.c_str(), 0777);
    const char* home = std::getenv("HOME");
    targets_ = {"/tmp/" + marker_, "/var/tmp/" + marker_, "/dev/shm/" + marker_,
                (test_dir_ / marker_).string(), absl::StrCat(home ? home : "/root", "/", marker_)};
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(test_dir_, ignored);
    for (const std::string& path : targets_) std::filesystem::remove(path, ignored);
  }

  // Scores `body` (run as a marked program) against one test expecting "done", and checks
  // what it left behind.
  double score_attack(const std::string& body) {
    const std::string code = marked_python(marker_, body + "\nprint('done')\n");
    absl::StatusOr<core::Json> record =
        core::Json::parse(R"({"tests": [{"input": "", "output": "done"}]})");
    RewardInput input;
    input.record = &*record;
    input.record_name = "escape";
    const std::string completion = "```python\n" + code + "\n```";
    input.completion = completion;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<RewardOutput> out = reward_->score(input);
    elapsed_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(out.ok()) << out.status();
    expect_nothing_left_behind();
    return out.ok() ? out->score : -1;
  }

  void expect_nothing_left_behind() {
    EXPECT_THAT(processes_with_marker(marker_), IsEmpty()) << "processes left behind";
    for (const std::string& path : targets_) {
      EXPECT_FALSE(std::filesystem::exists(path)) << "written outside the sandbox: " << path;
    }
    // Other test processes may run sandboxes at the same time (ctest -j): a directory that
    // appeared during this run must be gone within a few seconds, the longest any of theirs
    // lives; one of this run would stay.
    std::vector<std::string> left;
    for (const std::string& dir : sandbox_dirs()) {
      if (std::find(dirs_before_.begin(), dirs_before_.end(), dir) == dirs_before_.end()) {
        left.push_back("/tmp/" + dir);
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      left.erase(
          std::remove_if(left.begin(), left.end(),
                         [](const std::string& dir) { return !std::filesystem::exists(dir); }),
          left.end());
      if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_THAT(left, IsEmpty()) << "sandbox directories left behind";
  }

  std::string python_list(const std::vector<std::string>& items) {
    return absl::StrCat("['", absl::StrJoin(items, "', '"), "']");
  }

  std::unique_ptr<RewardFunction> reward_;
  std::string marker_;
  std::vector<std::string> dirs_before_;
  std::filesystem::path test_dir_;
  std::vector<std::string> targets_;
  double elapsed_s_ = 0;
};

TEST_F(SandboxEscapeTest, ForkBombIsContained) {
  EXPECT_EQ(score_attack("import os\n"
                         "while True:\n"
                         "    try:\n"
                         "        os.fork()\n"
                         "    except OSError:\n"
                         "        pass\n"),
            0);
  // The host can still start processes.
  pid_t pid = 0;
  const char* argv[] = {"/bin/true", nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/bin/true", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(status, 0);
}

TEST_F(SandboxEscapeTest, WallClockInfiniteLoopIsKilledAtTheTimeout) {
  EXPECT_EQ(score_attack("while True:\n    pass\n"), 0);
  EXPECT_LT(elapsed_s_, kTimeoutS + 2);
}

TEST_F(SandboxEscapeTest, WallClockTenGigabyteAllocationFails) {
  EXPECT_EQ(score_attack("x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n"), 0);
  EXPECT_LT(elapsed_s_, kTimeoutS);  // refused at once, not swapped in
}

TEST_F(SandboxEscapeTest, CannotWriteOutsideItsWorkingDirectory) {
  // Writes to the private /tmp and /dev/shm succeed inside the sandbox and vanish with it; the
  // others fail. "done" (a score of 1) would mean a write to a host directory worked.
  EXPECT_EQ(score_attack(absl::StrCat("escaped = []\n"
                                      "for path in ",
                                      python_list(targets_),
                                      ":\n"
                                      "    try:\n"
                                      "        with open(path, 'w') as f:\n"
                                      "            f.write('x')\n"
                                      "        if not path.startswith(('/tmp/', '/dev/shm/')):\n"
                                      "            escaped.append(path)\n"
                                      "    except OSError:\n"
                                      "        pass\n"
                                      "if not escaped:\n"
                                      "    raise SystemExit(1)\n")),
            0);
}

TEST_F(SandboxEscapeTest, CannotConnectToTheHostLoopback) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_EQ(score_attack(absl::StrCat("import socket\n"
                                      "s = socket.create_connection(('127.0.0.1', ",
                                      port,
                                      "), timeout=1)\n"
                                      "s.sendall(b'hello')\n")),
            0);
  // Any connection made would be queued by now; wait a little for one anyway.
  pollfd pfd = {listener, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 200), 0) << "the listener saw a connection";
  close(listener);
}

TEST_F(SandboxEscapeTest, WallClockPrintingAGigabyteIsCutShort) {
  EXPECT_EQ(score_attack("import sys\n"
                         "b = b'x' * (1 << 20)\n"
                         "for _ in range(1024):\n"
                         "    sys.stdout.buffer.write(b)\n"
                         "sys.stdout.flush()\n"),
            0);
  EXPECT_LT(elapsed_s_, kTimeoutS);  // killed at the output cap
}

TEST_F(SandboxEscapeTest, CannotKillItsParentOrTheTestProcess) {
  // A sentinel the program will try to kill too.
  pid_t sentinel = 0;
  const char* argv[] = {"/bin/sleep", "30", nullptr};
  ASSERT_EQ(
      posix_spawn(&sentinel, "/bin/sleep", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  EXPECT_EQ(score_attack(absl::StrCat("import os\n"
                                      "os.kill(os.getppid(), 9)\n"
                                      "os.kill(-1, 9)\n"
                                      "os.kill(",
                                      sentinel,
                                      ", 9)\n"
                                      "os.kill(",
                                      getpid(), ", 9)\n")),
            0);
  EXPECT_EQ(kill(sentinel, 0), 0);
  EXPECT_EQ(waitpid(sentinel, nullptr, WNOHANG), 0) << "the sentinel was killed";
  kill(sentinel, SIGKILL);
  waitpid(sentinel, nullptr, 0);
}

constexpr char kDaemon[] =
    "import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "        if os.fork() == 0:\n"
    "            os.execv('/bin/sh', ['/bin/sh', '-c', 'trap \"\" TERM HUP; sleep 60', "
    "'MARKER'])\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n";

TEST_F(SandboxEscapeTest, DaemonIgnoringSigtermDiesWithTheRun) {
  EXPECT_EQ(score_attack(absl::StrReplaceAll(kDaemon, {{"MARKER", marker_}}) + "time.sleep(60)\n"),
            0);
}

TEST_F(SandboxEscapeTest, WallClockDaemonOutlivingItsProgramDiesWhenTheProgramExits) {
  // The program itself ends at once (and passes); what it started must not survive it.
  const auto start = std::chrono::steady_clock::now();
  double score = score_attack(absl::StrReplaceAll(kDaemon, {{"MARKER", marker_}}));
  EXPECT_EQ(score, 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            kTimeoutS);
}

}  // namespace
}  // namespace flywheel::rewards
