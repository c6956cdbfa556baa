// Where each rank of a process group is in its sequence of collectives, on a filesystem every
// rank sees (the run directory; a shared one across nodes, as checkpoints need): before and
// after each collective a rank writes one fixed-size record (sequence number, in or out,
// operation, time, host, pid) into a file of its own. A rank whose collective times out reads
// the others' records and names the ranks that never reached it: the stuck ones. Collectives
// run in the same order on every rank of a group, so their sequence numbers compare; for a
// group that also sends point to point (the weights group) the records show each rank's last
// operation.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace flywheel::comm {

class ProgressBoard {
 public:
  // A board in `dir` (created if missing) for rank `rank` of `size` of group `group`; null when
  // `dir` is empty or cannot be written (the board is a diagnosis: a job runs without it).
  static std::unique_ptr<ProgressBoard> open(const std::string& dir, const std::string& group,
                                             int rank, int size);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Before and after collective number `seq`. One pwrite each, no fsync.
  void enter(uint64_t seq, const char* what);
  void leave(uint64_t seq, const char* what);
  // What the other ranks' records say while this one waits in collective `seq`: first the stuck
  // ranks, those that have not reached it ("rank 1 on nodeA (pid 42) has not reached it: its
  // last was #56 all_gather, left 6.1 s ago") and, on this host, those whose process is stopped
  // or gone; then the others.
  std::string report(uint64_t seq) const;
  const std::string& host() const { return host_; }

 private:
  ProgressBoard(std::string dir, std::string group, int rank, int size, int fd);
  std::string path(int rank) const;
  void write(uint64_t seq, bool in, const char* what);

  std::string dir_, group_, host_;  // group_: the group's name as a file name
  std::string name_;                // the group's name
  int rank_, size_, fd_;
  pid_t pid_;
};

struct CommunicatorOptions;

// Says that a collective timed out, in the log and on stderr: "collective WHAT on group 'G'
// (TRANSPORT) timed out: rank R of N on HOST waited S s (timeout T s); a rank stopped
// responding (BOARD). Aborting the job." The caller then exits with kTimeoutExitCode.
void report_collective_timeout(const char* transport, const std::string& what,
                               const CommunicatorOptions& options, int rank, int size,
                               double elapsed_s, const std::string& board);

}  // namespace flywheel::comm
