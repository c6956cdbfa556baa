#include "progress_board.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/logging.h"

namespace flywheel::comm {
namespace {

constexpr size_t kRecordBytes = 256;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Record {
  uint64_t seq = 0;
  std::string state, what, host;
  double time = 0;
  long pid = 0;
};

constexpr char kStopped[] = "its process is stopped";

// What /proc says of a process on this host: "" when it runs (or sleeps), else why it cannot
// make progress.
std::string process_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size()) {
    return "its process is gone";
  }
  switch (stat[paren + 2]) {
    case 'T':
    case 't':
      return kStopped;
    case 'Z':
    case 'X':
      return "its process is dead";
    default:
      return "";
  }
}

bool parse(const std::string& text, Record* r) {
  std::istringstream in(text);
  return static_cast<bool>(in >> r->seq >> r->state >> r->time >> r->pid >> r->host >> r->what);
}

}  // namespace

ProgressBoard::ProgressBoard(std::string dir, std::string group, int rank, int size, int fd)
    : dir_(std::move(dir)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      fd_(fd),
      pid_(getpid()) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
}

std::unique_ptr<ProgressBoard> ProgressBoard::open(const std::string& dir, const std::string& group,
                                                   int rank, int size) {
  if (dir.empty()) return nullptr;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string name;
  for (char c : group) name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  std::unique_ptr<ProgressBoard> board(new ProgressBoard(dir, name, rank, size, -1));
  board->name_ = group;
  board->fd_ = ::open(board->path(rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (board->fd_ < 0) return nullptr;
  board->write(0, false, "start");
  return board;
}

ProgressBoard::~ProgressBoard() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ProgressBoard::path(int rank) const {
  return absl::StrCat(dir_, "/", group_, ".rank", rank);
}

void ProgressBoard::write(uint64_t seq, bool in, const char* what) {
  std::string what_word;
  for (const char* c = what; *c != '\0'; ++c) what_word.push_back(*c == ' ' ? '_' : *c);
  std::string record = absl::StrFormat("%d %s %.3f %d %s %s", seq, in ? "in" : "out",
                                       unix_seconds(), static_cast<long>(pid_), host_, what_word);
  record.resize(kRecordBytes - 1, ' ');
  record.push_back('\n');
  (void)!::pwrite(fd_, record.data(), record.size(), 0);
}

void ProgressBoard::enter(uint64_t seq, const char* what) { write(seq, true, what); }
void ProgressBoard::leave(uint64_t seq, const char* what) { write(seq, false, what); }

std::string ProgressBoard::report(uint64_t seq) const {
  const double now = unix_seconds();
  // Stopped processes; dead or gone ones (a rank that gave up may have exited before this
  // one); ranks behind; the rest; ranks without a record.
  std::string halted, ended, behind, others, unknown;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::ifstream in(path(r));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Record rec;
    if (!parse(text, &rec)) {  // no shared directory, or a rank that never got this far
      absl::StrAppend(&unknown, unknown.empty() ? "" : "; ", "rank ", r);
      continue;
    }
    const std::string state = rec.host == host_ ? process_state(rec.pid) : "";
    const std::string who = absl::StrCat("rank ", r, " on ", rec.host, " (pid ", rec.pid,
                                         state.empty() ? "" : ", " + state, ")");
    const std::string last =
        absl::StrFormat("#%d %s, %s %.1f s ago", rec.seq, rec.what,
                        rec.state == "in" ? "entered" : "left", now - rec.time);
    if (!state.empty()) {  // cannot take part, wherever it is: named first, stopped ones first
      const std::string where =
          rec.seq < seq
              ? absl::StrCat(" has not reached it: its last was ", last)
              : absl::StrCat(rec.seq == seq && rec.state == "in" ? " is in it" : " is past it",
                             " (", last, ")");
      std::string& list = state == kStopped ? halted : ended;
      absl::StrAppend(&list, list.empty() ? "" : "; ", who, where);
    } else if (rec.seq < seq) {
      absl::StrAppend(&behind, behind.empty() ? "" : "; ", who,
                      " has not reached it: its last was ", last);
    } else {
      absl::StrAppend(&others, others.empty() ? "" : "; ", who,
                      rec.seq == seq && rec.state == "in" ? " waits in it too" : " is past it",
                      " (", last, ")");
    }
  }
  std::string out = absl::StrCat("this was collective #", seq, " of group '", name_, "'");
  for (const std::string* more : {&ended, &behind}) {
    if (!halted.empty() && !more->empty()) absl::StrAppend(&halted, "; ");
    absl::StrAppend(&halted, *more);
  }
  if (!halted.empty()) absl::StrAppend(&out, ". Stuck: ", halted);
  if (!others.empty()) absl::StrAppend(&out, ". Others: ", others);
  if (!unknown.empty()) absl::StrAppend(&out, ". No progress record (in ", dir_, ") of ", unknown);
  return out;
}

void report_collective_timeout(const char* transport, const std::string& what,
                               const CommunicatorOptions& options, int rank, int size,
                               double elapsed_s, const std::string& board) {
  const std::string message =
      absl::StrCat("collective ", what, " on group '", options.name, "' (", transport,
                   ") timed out: rank ", rank, " of ", size, " on ", host_name(), " waited ",
                   elapsed_s, " s (timeout ", options.timeout_s, " s); a rank stopped responding",
                   board.empty() ? "" : absl::StrCat(" (", board, ")"), ". Aborting the job.");
  FLYWHEEL_LOG_ERROR("%s", message);
  std::fprintf(stderr, "flywheel: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace flywheel::comm
