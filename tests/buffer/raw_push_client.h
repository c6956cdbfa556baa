// Test helper: a PushGroups client that sends arbitrary bytes (malformed, mutated or hostile
// messages) and returns the acks exactly as the server sent them, or never reads them.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace flywheel::buffer {

struct RawPushOptions {
  bool read_acks = true;  // false: never read an ack (a slow or hostile client)
  std::string token;
};

// One PushGroups call writing `messages` one after another, then WritesDone.
class RawPushCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawPushCall(std::shared_ptr<grpc::Channel> channel, std::vector<std::string> messages,
              const RawPushOptions& options = {})
      : stub_(std::move(channel)), messages_(std::move(messages)), options_(options) {
    if (!options_.token.empty()) context_.AddMetadata("authorization", "Bearer " + options_.token);
    stub_.PrepareBidiStreamingCall(&context_, "/flywheel.v1.Controller/PushGroups",
                                   grpc::StubOptions(), this);
    if (options_.read_acks) StartRead(&ack_);
    write_next();
    StartCall();
  }

  // Blocks until the call ends.
  grpc::Status wait() {
    done_.WaitForNotification();
    return status_;
  }
  void cancel() { context_.TryCancel(); }
  bool done() const { return done_.HasBeenNotified(); }
  // Messages whose write completed.
  int64_t written() const { return written_.load(); }
  std::vector<std::string> acks() {
    absl::MutexLock lock(&mu_);
    return acks_;
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;
    ++written_;
    write_next();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::vector<grpc::Slice> slices;
    ack_.Dump(&slices);
    std::string bytes;
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    {
      absl::MutexLock lock(&mu_);
      acks_.push_back(std::move(bytes));
    }
    StartRead(&ack_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

 private:
  void write_next() {
    const size_t i = next_++;
    if (i == messages_.size()) {
      StartWritesDone();
      return;
    }
    grpc::Slice slice(messages_[i]);
    request_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&request_);
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  std::vector<std::string> messages_;
  RawPushOptions options_;
  size_t next_ = 0;  // only the reactor's write chain touches it
  grpc::ByteBuffer request_, ack_;
  std::atomic<int64_t> written_{0};
  absl::Mutex mu_;
  std::vector<std::string> acks_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_;
  absl::Notification done_;
};

}  // namespace flywheel::buffer
