// The push streams a server has open, so that shutdown can close them at once instead of waiting
// out its deadline on streams whose clients are idle.
//
// The lock is recursive on purpose: closing a stream may cancel its call, and gRPC may then run
// the stream's reactions to completion inline, on the closing thread, down to OnDone, which
// removes the stream from here.
#pragma once

#include <mutex>
#include <set>
#include <vector>

namespace flywheel::buffer {

template <typename Stream>
class StreamRegistry {
 public:
  // False once close_all() ran: the caller must not start the stream.
  bool add(Stream* stream) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (closing_) return false;
    streams_.insert(stream);
    return true;
  }
  void remove(Stream* stream) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    streams_.erase(stream);
  }
  // Calls stream->close() on every open stream; a stream may be gone (removed) after its call.
  void close_all() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    closing_ = true;
    const std::vector<Stream*> open(streams_.begin(), streams_.end());
    for (Stream* stream : open) {
      if (streams_.count(stream)) stream->close();
    }
  }

 private:
  std::recursive_mutex mu_;
  std::set<Stream*> streams_;
  bool closing_ = false;
};

}  // namespace flywheel::buffer
