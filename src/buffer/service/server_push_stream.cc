#include "server_push_stream.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <utility>

#include "flywheel/buffer/wire_codec.h"
#include "flywheel/core/utf8.h"
#include "flywheel/v1/controller.pb.h"

namespace flywheel::buffer {
namespace {

// What an ack may carry of a client's bytes: acks must parse as PushAck whatever was pushed.
std::string echoed_id(const std::string& id) {
  return id.size() <= ServerPushStream::kMaxEchoedIdBytes && core::is_valid_utf8(id) ? id : "";
}

std::string ack_message(absl::string_view message) {
  std::string text = core::utf8_lossy(message);
  if (text.size() <= ServerPushStream::kMaxAckMessageBytes) return text;
  size_t cut = ServerPushStream::kMaxAckMessageBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

}  // namespace

struct ServerPushStream::Pending {
  uint64_t seq = 0;
  grpc::ByteBuffer bytes;
  TrajectoryGroup group;
  std::string group_id;  // kept: `group` is moved into the core by a successful push
  double deadline = 0;
  absl::Status status;  // of decoding, then of the push
  std::string outcome;  // of an accepted push
};

ServerPushStream::ServerPushStream(const ServerPushStreamContext& context,
                                   grpc::CallbackServerContext* server_context,
                                   const grpc::Status& authorized)
    : context_(context), server_context_(server_context) {
  if (!authorized.ok()) {
    finished_ = true;
    Finish(authorized);
    return;
  }
  bool open;
  {
    // Under mu_: a close() right after add() must see the read this constructor starts.
    absl::MutexLock lock(&mu_);
    open = context_.registry->add(this);
    finished_ = !open;
    read_in_flight_ = open;
  }
  if (!open) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down"));
    return;
  }
  StartRead(&request_);
}

void ServerPushStream::OnDone() {
  context_.registry->remove(this);
  delete this;
}

void ServerPushStream::close() {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    next = next_locked();
  }
  start(next);
}

void ServerPushStream::OnReadDone(bool ok) {
  auto pending = std::make_shared<Pending>();
  Next next;
  {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (!ok) reads_done_ = true;  // the client finished writing or went away
    if (ok) {
      pending->seq = next_seq_++;
      pending->bytes.Swap(&request_);
      ++in_process_;
    }
    next = next_locked();  // reads ahead while this group is processed
  }
  start(next);
  if (!ok) return;
  {
    grpc::ProtoBufferReader reader(&pending->bytes);
    DecodeLimits limits;
    limits.max_trajectories = context_.core->max_trajectories();
    pending->status = decode_group(&reader, pending->bytes.Length(), limits, &pending->group);
  }
  pending->bytes.Clear();
  pending->group_id = echoed_id(pending->group.group_id);
  {
    absl::MutexLock lock(&mu_);
    decoded_.emplace(pending->seq, std::move(pending));
  }
  push_in_order();
}

// Pushes the decoded groups into the core one at a time, in the order they were read, so that a
// stream's groups are buffered in the order it sent them whichever decode finished first.
void ServerPushStream::push_in_order() {
  while (true) {
    std::shared_ptr<Pending> pending;
    {
      absl::MutexLock lock(&mu_);
      if (pushing_ || decoded_.empty() || decoded_.begin()->first != next_push_) return;
      pending = std::move(decoded_.begin()->second);
      decoded_.erase(decoded_.begin());
      pushing_ = true;
    }
    if (pending->status.ok()) {
      pending->deadline = context_.clock() + context_.push_timeout_s;
      if (!attempt(pending)) return;  // retried from the timer, which carries on from there
    }
    if (acknowledge(*pending)) return;  // the stream is finished: `this` may be gone
  }
}

bool ServerPushStream::attempt(const std::shared_ptr<Pending>& pending) {
  absl::StatusOr<PushOutcome> outcome =
      context_.core->push(std::move(pending->group), context_.clock());
  bool closing;
  {
    absl::MutexLock lock(&mu_);
    closing = closing_;
  }
  if (!outcome.ok() && outcome.status().code() == absl::StatusCode::kResourceExhausted && closing) {
    outcome = absl::UnavailableError(
        "the buffer is full and the controller is shutting down; push again once it is back");
  }
  if (!outcome.ok() && outcome.status().code() == absl::StatusCode::kResourceExhausted &&
      context_.clock() < pending->deadline && !server_context_->IsCancelled()) {
    context_.timer->schedule(absl::Milliseconds(5), [this, pending] {
      if (!attempt(pending) || acknowledge(*pending)) return;
      push_in_order();
    });
    return false;
  }
  pending->status = outcome.status();
  if (outcome.ok()) pending->outcome = push_outcome_name(*outcome);
  return true;
}

// Queues the ack of a pushed (or undecodable) group and lets the next group be pushed. True
// when this finished the stream (the client stopped reading acks and writing groups): the
// reactor may then be deleted at any moment, so the caller must not touch it.
bool ServerPushStream::acknowledge(const Pending& pending) {
  v1::PushAck ack;
  ack.set_group_id(pending.group_id);
  ack.set_code(static_cast<int32_t>(pending.status.code()));
  if (pending.status.ok()) {
    ack.set_outcome(pending.outcome);
  } else {
    ack.set_message(ack_message(pending.status.message()));
  }
  const std::string bytes = ack.SerializeAsString();
  grpc::Slice slice(bytes);
  Next next;
  {
    absl::MutexLock lock(&mu_);
    acks_.emplace(pending.seq, grpc::ByteBuffer(&slice, 1));
    --in_process_;
    pushing_ = false;
    ++next_push_;
    next = next_locked();
  }
  start(next);
  // A cancel (shutdown) may have ended the call inline, like a finish: `this` may be gone.
  return next.finish || next.cancel;
}

void ServerPushStream::OnWriteDone(bool ok) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) write_failed_ = true;  // the client went away; what it pushed is kept
    next = next_locked();
  }
  start(next);
}

// Decides, from the state, whether to read the next group, write the next ack (in read order)
// and finish the stream.
ServerPushStream::Next ServerPushStream::next_locked() {
  Next next;
  if (write_failed_) acks_.clear();
  // Groups read whose ack is not on the wire yet.
  const int64_t unacked = in_process_ + static_cast<int64_t>(acks_.size()) + write_in_flight_;
  if (!read_in_flight_ && !reads_done_ && !closing_ && in_process_ < kMaxInProcess &&
      unacked < kMaxUnacked) {
    read_in_flight_ = true;
    next.read = true;
  }
  if (!write_in_flight_ && !acks_.empty() && acks_.begin()->first == next_ack_) {
    writing_ = std::move(acks_.begin()->second);
    acks_.erase(acks_.begin());
    ++next_ack_;
    write_in_flight_ = true;
    next.write = &writing_;
  }
  const bool settled = in_process_ == 0 && !write_in_flight_ && acks_.empty();
  if (settled && closing_ && read_in_flight_ && !cancelled_) {
    cancelled_ = true;  // the pending read then completes with ok = false
    next.cancel = true;
  }
  if (settled && (reads_done_ || closing_) && !read_in_flight_ && !finished_) {
    finished_ = true;
    next.finish = true;
    if (!reads_done_) {
      next.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down");
    }
  }
  return next;
}

void ServerPushStream::start(const Next& next) {
  if (next.read) StartRead(&request_);
  if (next.write != nullptr) StartWrite(next.write);
  if (next.cancel) {
    server_context_->TryCancel();  // may run this stream's reactions inline, down to OnDone
    return;
  }
  if (next.finish) Finish(next.status);
}

}  // namespace flywheel::buffer
