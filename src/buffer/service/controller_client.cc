#include "flywheel/buffer/controller_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "transport_args.h"
#include "wire_codec.h"

namespace flywheel::buffer {
namespace {

absl::Status from_grpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

grpc::ChannelArguments channel_arguments(const ControllerClientOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  if (!o.tls_target_name.empty()) args.SetSslTargetNameOverride(o.tls_target_name);
  set_transport_args([&](const char* name, int v) { args.SetInt(name, v); });
  return args;
}

using PushStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PushAck>;

}  // namespace

struct ControllerClient::Stub {
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : stub(v1::Controller::NewStub(channel)), generic(channel) {}
  std::unique_ptr<v1::Controller::Stub> stub;
  PushStub generic;  // PushGroups, whose requests wire_codec writes
};

absl::StatusOr<std::unique_ptr<ControllerClient>> ControllerClient::connect(
    const ControllerClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_root_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_ca_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  return over(grpc::CreateCustomChannel(options.address, credentials, channel_arguments(options)),
              options);
}

absl::StatusOr<std::unique_ptr<ControllerClient>> ControllerClient::over(
    std::shared_ptr<grpc::Channel> channel, const ControllerClientOptions& options) {
  if (options.worker_id.empty()) return absl::InvalidArgumentError("client needs a worker_id");
  std::unique_ptr<ControllerClient> client(new ControllerClient());
  client->options_ = options;
  client->channel_ = std::move(channel);
  client->stub_ = std::make_unique<Stub>(client->channel_);
  return client;
}

ControllerClient::~ControllerClient() {
  stop_.Notify();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

// Runs `call(context)` until it succeeds, fails with something other than UNAVAILABLE, or the
// attempts run out; every attempt gets a fresh context with the token and the deadline.
template <typename Call>
absl::Status ControllerClient::with_retries(Call&& call) {
  double backoff = options_.backoff_initial_s;
  grpc::Status status;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(options_.deadline_s * 1e6)));
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    status = call(&context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return from_grpc(status);
    ++reconnects_;
    if (stop_.WaitForNotificationWithTimeout(absl::Seconds(backoff))) break;
    backoff = std::min(backoff * 2, options_.backoff_max_s);
  }
  return from_grpc(status);
}

absl::StatusOr<v1::RegisterReply> ControllerClient::register_worker(
    const std::map<std::string, std::string>& capabilities) {
  v1::RegisterRequest request;
  request.set_worker_id(options_.worker_id);
  for (const auto& [k, v] : capabilities) (*request.mutable_capabilities())[k] = v;
  v1::RegisterReply reply;
  absl::Status s = with_retries(
      [&](grpc::ClientContext* c) { return stub_->stub->Register(c, request, &reply); });
  if (!s.ok()) return s;
  return reply;
}

absl::StatusOr<v1::AcquireWorkReply> ControllerClient::acquire_work(int64_t max_prompts) {
  v1::AcquireWorkRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_max_prompts(max_prompts);
  v1::AcquireWorkReply reply;
  absl::Status s = with_retries([&](grpc::ClientContext* c) {
    reply.Clear();
    return stub_->stub->AcquireWork(c, request, &reply);
  });
  if (!s.ok()) return s;
  return reply;
}

absl::Status ControllerClient::release_lease(uint64_t lease_id) {
  v1::ReleaseLeaseRequest request;
  request.set_lease_id(lease_id);
  v1::ReleaseLeaseReply reply;
  return with_retries(
      [&](grpc::ClientContext* c) { return stub_->stub->ReleaseLease(c, request, &reply); });
}

absl::StatusOr<v1::StatusReply> ControllerClient::status() {
  v1::StatusRequest request;
  v1::StatusReply reply;
  absl::Status s = with_retries([&](grpc::ClientContext* c) {
    reply.Clear();
    return stub_->stub->GetStatus(c, request, &reply);
  });
  if (!s.ok()) return s;
  return reply;
}

namespace {

// One PushGroups stream. The calling thread encodes the groups (wire_codec) ahead into slots
// while gRPC's threads write them, one write in flight, so encoding overlaps the socket
// writes; acks are collected by group id.
class PushCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, v1::PushAck> {
 public:
  PushCall(std::vector<const TrajectoryGroup*> groups, const std::string& worker_id,
           std::map<std::string, v1::PushAck>* acks)
      : groups_(std::move(groups)), worker_id_(worker_id), acks_(acks) {}

  grpc::Status run(PushStub* stub, grpc::ClientContext* context) {
    grpc::StubOptions options;
    stub->PrepareBidiStreamingCall(context, "/flywheel.v1.Controller/PushGroups", options, this);
    StartRead(&ack_);
    if (groups_.empty()) StartWritesDone();
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
    (*acks_)[ack_.group_id()] = ack_;
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
  std::map<std::string, v1::PushAck>* acks_;  // only OnReadDone writes it until done_
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

absl::StatusOr<std::vector<v1::PushAck>> ControllerClient::push_groups(
    const std::vector<TrajectoryGroup>& groups) {
  std::map<std::string, v1::PushAck> acks;  // by group id
  absl::Status s = with_retries([&](grpc::ClientContext* c) {
    std::vector<const TrajectoryGroup*> pending;  // not acknowledged before a reconnect
    for (const TrajectoryGroup& g : groups) {
      if (!acks.count(g.group_id)) pending.push_back(&g);
    }
    PushCall call(std::move(pending), options_.worker_id, &acks);
    grpc::Status status = call.run(&stub_->generic, c);
    if (status.ok() && acks.size() < groups.size()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended before every ack");
    }
    return status;
  });
  if (!s.ok()) return s;
  std::vector<v1::PushAck> ordered;
  for (const TrajectoryGroup& g : groups) ordered.push_back(acks[g.group_id]);
  return ordered;
}

void ControllerClient::start_heartbeats(double interval_s) {
  if (heartbeat_thread_.joinable()) return;
  heartbeat_thread_ = std::thread([this, interval_s] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(interval_s))) {
      v1::HeartbeatRequest request;
      request.set_worker_id(options_.worker_id);
      v1::HeartbeatReply reply;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
      stub_->stub->Heartbeat(&context, request, &reply);  // a missed beat is retried next tick
    }
  });
}

}  // namespace flywheel::buffer
