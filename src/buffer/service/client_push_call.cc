#include "client_push_call.h"

#include <cstdint>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "flywheel/buffer/wire_codec.h"

namespace flywheel::buffer {
namespace {

// One PushGroups stream. The calling thread encodes the groups (wire_codec) ahead into slots
// while gRPC's threads write them, one write in flight, so encoding overlaps the socket
// writes; acks are collected in order.
class PushCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, v1::PushAck> {
 public:
  PushCall(std::vector<const TrajectoryGroup*> groups, const std::string& worker_id,
           std::vector<v1::PushAck>* acks)
      : groups_(std::move(groups)), worker_id_(worker_id), acks_(acks) {}

  grpc::Status run(PushStub* stub, grpc::ClientContext* context) {
    grpc::StubOptions options;
    stub->PrepareBidiStreamingCall(context, "/flywheel.v1.Controller/PushGroups", options, this);
    StartRead(&ack_);
    if (groups_.empty()) StartWritesDone();
    // This thread may start writes until the loop ends; the hold keeps the call from being
    // finished (OnDone) before that.
    AddHold();
    StartCall();
    for (size_t i = 0; i < groups_.size(); ++i) {
      {
        // Slot i % kSlots is free once group i - kSlots is written.
        absl::MutexLock lock(&mu_);
        auto free = [&] { return broken_ || written_ + kSlots > i; };
        mu_.Await(absl::Condition(&free));
        if (broken_) break;
      }
      grpc::ByteBuffer buffer = to_byte_buffer(*groups_[i]);
      Slot& slot = slots_[i % kSlots];
      bool start = false;
      {
        absl::MutexLock lock(&mu_);
        slot.buffer = std::move(buffer);
        slot.group = i;
        start = due_ == i;  // the previous write finished before this group was ready
        if (start) due_ = SIZE_MAX;
      }
      if (start) StartWrite(&slot.buffer);
    }
    RemoveHold();
    done_.WaitForNotification();
    return status_;
  }

  void OnWriteDone(bool ok) override {
    size_t next;
    bool ready = false;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {  // the stream broke; OnDone reports why
        broken_ = true;
        return;
      }
      next = ++written_;
      if (next < groups_.size()) {
        ready = slots_[next % kSlots].group == next;
        if (!ready) due_ = next;  // the encoding thread starts it
      }
    }
    if (next == groups_.size()) {
      StartWritesDone();
    } else if (ready) {
      StartWrite(&slots_[next % kSlots].buffer);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    acks_->push_back(ack_);
    StartRead(&ack_);
  }

  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;  // releases an encoding loop still waiting for a slot
    }
    status_ = status;
    done_.Notify();
  }

 private:
  // The group's wire bytes with its token arrays referenced in place, not copied: they stay
  // valid because push_groups() returns only after the stream is done.
  grpc::ByteBuffer to_byte_buffer(const TrajectoryGroup& group) {
    std::string scratch;
    const std::vector<WireSegment> segments = encode_group_segments(group, worker_id_, &scratch);
    const grpc::Slice small(scratch);
    std::vector<grpc::Slice> slices;
    slices.reserve(segments.size());
    for (const WireSegment& s : segments) {
      if (s.external != nullptr) {
        slices.emplace_back(const_cast<uint8_t*>(s.external), s.size, grpc::Slice::STATIC_SLICE);
      } else {
        slices.push_back(small.sub(s.offset, s.offset + s.size));
      }
    }
    return grpc::ByteBuffer(slices.data(), slices.size());
  }

  struct Slot {
    grpc::ByteBuffer buffer;
    size_t group = SIZE_MAX;  // the group `buffer` holds
  };

  std::vector<const TrajectoryGroup*> groups_;
  const std::string& worker_id_;
  std::vector<v1::PushAck>* acks_;  // only OnReadDone writes it until done_
  absl::Mutex mu_;
  // Encoded groups waiting for their write: the encoder runs up to kSlots groups ahead, so the
  // callback that finishes one write usually finds the next ready.
  static constexpr size_t kSlots = 16;
  Slot slots_[kSlots];
  size_t written_ ABSL_GUARDED_BY(mu_) = 0;  // writes completed
  size_t due_ ABSL_GUARDED_BY(mu_) = 0;      // a write that waits for its encoding
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  v1::PushAck ack_;
  grpc::Status status_;
  absl::Notification done_;
};

}  // namespace

grpc::Status push_over_one_stream(PushStub* stub, grpc::ClientContext* context,
                                  std::vector<const TrajectoryGroup*> groups,
                                  const std::string& worker_id, std::vector<v1::PushAck>* acks) {
  PushCall call(std::move(groups), worker_id, acks);
  return call.run(stub, context);
}

}  // namespace flywheel::buffer
