#include "push_stream.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <utility>

#include "flywheel/v1/controller.pb.h"
#include "wire_codec.h"

namespace flywheel::buffer {

struct PushStream::Pending {
  uint64_t seq = 0;
  grpc::ByteBuffer bytes;
  TrajectoryGroup group;
  std::string group_id;  // kept: `group` is moved into the core by a successful push
  double deadline = 0;
  absl::Status status;  // of decoding, then of the push
  std::string outcome;  // of an accepted push
};

PushStream::PushStream(const PushStreamContext& context,
                       grpc::CallbackServerContext* server_context, const grpc::Status& authorized)
    : context_(context), server_context_(server_context) {
  if (!authorized.ok()) {
    finished_ = true;
    Finish(authorized);
    return;
  }
  read_in_flight_ = true;
  StartRead(&request_);
}

void PushStream::OnReadDone(bool ok) {
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
    limits.max_trajectories = context_.core->group_size();
    pending->status = decode_group(&reader, pending->bytes.Length(), limits, &pending->group);
  }
  pending->bytes.Clear();
  pending->group_id = pending->group.group_id;
  {
    absl::MutexLock lock(&mu_);
    decoded_.emplace(pending->seq, std::move(pending));
  }
  push_in_order();
}

// Pushes the decoded groups into the core one at a time, in the order they were read, so that a
// stream's groups are buffered in the order it sent them whichever decode finished first.
void PushStream::push_in_order() {
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

bool PushStream::attempt(const std::shared_ptr<Pending>& pending) {
  absl::StatusOr<PushOutcome> outcome =
      context_.core->push(std::move(pending->group), context_.clock());
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
bool PushStream::acknowledge(const Pending& pending) {
  v1::PushAck ack;
  ack.set_group_id(pending.group_id);
  ack.set_code(static_cast<int32_t>(pending.status.code()));
  if (pending.status.ok()) {
    ack.set_outcome(pending.outcome);
  } else {
    ack.set_message(std::string(pending.status.message()));
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
  return next.finish;
}

void PushStream::OnWriteDone(bool ok) {
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
PushStream::Next PushStream::next_locked() {
  Next next;
  if (!read_in_flight_ && !reads_done_ && in_process_ < kMaxInProcess) {
    read_in_flight_ = true;
    next.read = true;
  }
  if (write_failed_) acks_.clear();
  if (!write_in_flight_ && !acks_.empty() && acks_.begin()->first == next_ack_) {
    writing_ = std::move(acks_.begin()->second);
    acks_.erase(acks_.begin());
    ++next_ack_;
    write_in_flight_ = true;
    next.write = &writing_;
  }
  if (reads_done_ && in_process_ == 0 && !write_in_flight_ && acks_.empty() && !finished_) {
    finished_ = true;
    next.finish = true;
  }
  return next;
}

void PushStream::start(const Next& next) {
  if (next.read) StartRead(&request_);
  if (next.write != nullptr) StartWrite(next.write);
  if (next.finish) Finish(grpc::Status::OK);
}

}  // namespace flywheel::buffer
