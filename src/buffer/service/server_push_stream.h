// One PushGroups stream on the server: reads serialized groups, decodes them (wire_codec),
// pushes them into the core and answers each with a PushAck, in order.
//
// Up to kMaxInProcess groups of one stream are in process at once: the next group is read and
// decoded while the previous one is still being decoded or pushed. Pushes into the core happen
// one at a time in the order the groups were read, and the acks go out in that order. A push
// refused because the buffer is full is retried from the timer every 5 ms until the push deadline
// or a cancel; no gRPC thread waits meanwhile.
//
// Memory: the stream stops reading while kMaxUnacked groups are read but not yet acknowledged on
// the wire (a client that does not read its acks stalls on flow control instead of making the
// server queue acks). What one stream makes the server hold is thus bounded by gRPC's stream
// window (kStreamWindowBytes) plus kMaxInProcess groups (each as bytes and decoded, 2 x the
// message) plus kMaxUnacked acks of at most kMaxAckBytes. Acks never echo a group_id that is not
// valid UTF-8 or longer than kMaxEchoedIdBytes (it is left empty; acks are matched by order), and
// their message is valid UTF-8 of at most kMaxAckMessageBytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/controller_core.h"
#include "retry_timer.h"
#include "stream_registry.h"

namespace flywheel::buffer {

class ServerPushStream;

struct ServerPushStreamContext {
  ControllerCore* core = nullptr;
  std::function<double()> clock;  // seconds, monotonic
  double push_timeout_s = 60;     // how long a push waits on a full buffer
  RetryTimer* timer = nullptr;
  StreamRegistry<ServerPushStream>* registry = nullptr;
};

class ServerPushStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  static constexpr int kMaxInProcess = 2;
  static constexpr int kMaxUnacked = 8;
  static constexpr size_t kMaxEchoedIdBytes = 256;
  static constexpr size_t kMaxAckMessageBytes = 1024;
  static constexpr size_t kMaxAckBytes = kMaxEchoedIdBytes + kMaxAckMessageBytes + 64;

  // Finishes at once with `authorized` when it is not OK, and with UNAVAILABLE when the server
  // is shutting down.
  ServerPushStream(const ServerPushStreamContext& context,
                   grpc::CallbackServerContext* server_context, const grpc::Status& authorized);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  // Shutdown: reads no further groups, acknowledges those in process, then ends the call; an
  // idle stream (waiting for its client's next group) is cancelled at once. `this` may be
  // deleted before close() returns.
  void close();

 private:
  struct Pending;  // one group between its read and its ack

  // What to start once mu_ is released (gRPC may run a reaction inline from a Start call, and
  // that reaction takes mu_).
  struct Next {
    bool read = false;
    grpc::ByteBuffer* write = nullptr;
    bool finish = false;
    bool cancel = false;  // an idle stream that is closing: end its pending read
    grpc::Status status;  // of the finish
  };

  void push_in_order();
  // Pushes the group; false when the buffer is full and a retry was scheduled.
  bool attempt(const std::shared_ptr<Pending>& pending);
  bool acknowledge(const Pending& pending);
  Next next_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void start(const Next& next);

  ServerPushStreamContext context_;
  grpc::CallbackServerContext* server_context_;
  grpc::ByteBuffer request_;  // the read in flight writes here
  absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;   // of the next group read
  uint64_t next_ack_ ABSL_GUARDED_BY(mu_) = 0;   // seq of the next ack to write
  uint64_t next_push_ ABSL_GUARDED_BY(mu_) = 0;  // seq of the next group to push
  std::map<uint64_t, std::shared_ptr<Pending>> decoded_ ABSL_GUARDED_BY(mu_);  // waiting to push
  bool pushing_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, grpc::ByteBuffer> acks_ ABSL_GUARDED_BY(mu_);  // ready, by seq
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  int in_process_ ABSL_GUARDED_BY(mu_) = 0;
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace flywheel::buffer
