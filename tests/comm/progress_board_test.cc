// The progress board names the ranks that hold a collective up: behind it, or stopped in it.
#include "progress_board.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::comm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string fresh_dir(const char* name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ProgressBoardTest, NamesTheRanksBehindAndThoseWaitingToo) {
  const std::string dir = fresh_dir("board_behind");
  auto r0 = ProgressBoard::open(dir, "learners", 0, 4);
  auto r1 = ProgressBoard::open(dir, "learners", 1, 4);
  auto r2 = ProgressBoard::open(dir, "learners", 2, 4);
  ASSERT_NE(r0, nullptr);
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    r0->enter(seq, "all_reduce(sum)");
    r1->enter(seq, "all_reduce(sum)");
    r2->enter(seq, "all_reduce(sum)");
    r0->leave(seq, "all_reduce(sum)");
    r1->leave(seq, "all_reduce(sum)");
    r2->leave(seq, "all_reduce(sum)");
  }
  r0->enter(3, "all_gather");
  r2->enter(3, "all_gather");
  const std::string report = r0->report(3);
  const std::string host = r0->host();
  EXPECT_THAT(report, HasSubstr("this was collective #3 of group 'learners'. Stuck: rank 1 on " +
                                host + " (pid " + std::to_string(getpid()) +
                                ") has not reached it: its last was #2 all_reduce(sum), left "));
  EXPECT_THAT(report, HasSubstr(". No progress record (in " + dir + ") of rank 3"));
  EXPECT_THAT(report, HasSubstr("Others: rank 2 on " + host + " (pid " + std::to_string(getpid()) +
                                ") waits in it too (#3 all_gather"));
  std::filesystem::remove_all(dir);
}

// A rank's process that is stopped (SIGSTOP) is stuck even inside the collective, and named
// before the ranks that are merely behind (in a group that also sends point to point, those may
// just count differently); one that exited is gone.
TEST(ProgressBoardTest, AStoppedOrGoneProcessOnThisHostIsStuckWhereverItIs) {
  const std::string dir = fresh_dir("board_stopped");
  auto r0 = ProgressBoard::open(dir, "g", 0, 4);
  auto r3 = ProgressBoard::open(dir, "g", 3, 4);
  ASSERT_NE(r0, nullptr);
  r3->enter(5, "recv");
  pid_t stopped = fork();
  if (stopped == 0) {
    auto r1 = ProgressBoard::open(dir, "g", 1, 4);
    r1->enter(7, "broadcast");
    raise(SIGSTOP);
    _exit(0);
  }
  pid_t gone = fork();
  if (gone == 0) {
    auto r2 = ProgressBoard::open(dir, "g", 2, 4);
    r2->enter(7, "broadcast");
    r2->leave(7, "broadcast");
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(stopped, &status, WUNTRACED), stopped);
  ASSERT_TRUE(WIFSTOPPED(status));
  ASSERT_EQ(waitpid(gone, &status, 0), gone);
  const std::string report = r0->report(7);
  EXPECT_THAT(report,
              HasSubstr("Stuck: rank 1 on " + r0->host() + " (pid " + std::to_string(stopped) +
                        ", its process is stopped) is in it (#7 broadcast, entered "));
  EXPECT_THAT(report, HasSubstr("rank 2 on " + r0->host() + " (pid " + std::to_string(gone) +
                                ", its process is gone) is past it (#7 broadcast, left "));
  EXPECT_THAT(report, HasSubstr("; rank 3 on " + r0->host() + " (pid " + std::to_string(getpid()) +
                                ") has not reached it: its last was #5 recv, entered "));
  EXPECT_LT(report.find("rank 2 on"), report.find("rank 3 on"));
  EXPECT_THAT(report, Not(HasSubstr("Others")));
  kill(stopped, SIGKILL);
  waitpid(stopped, &status, 0);
  std::filesystem::remove_all(dir);
}

TEST(ProgressBoardTest, NoDirectoryNoBoard) {
  EXPECT_EQ(ProgressBoard::open("", "g", 0, 2), nullptr);
  EXPECT_EQ(ProgressBoard::open("/proc/no/such/dir", "g", 0, 2), nullptr);
}

}  // namespace
}  // namespace flywheel::comm
