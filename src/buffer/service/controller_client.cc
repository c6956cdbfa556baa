#include "flywheel/buffer/controller_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "push_call.h"
#include "transport_args.h"

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

absl::StatusOr<std::vector<v1::PushAck>> ControllerClient::push_groups(
    const std::vector<TrajectoryGroup>& groups) {
  std::vector<std::optional<v1::PushAck>> acks(groups.size());  // by position
  absl::Status s = with_retries([&](grpc::ClientContext* c) {
    std::vector<size_t> pending;  // not acknowledged before a reconnect
    std::vector<const TrajectoryGroup*> sent;
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!acks[i]) {
        pending.push_back(i);
        sent.push_back(&groups[i]);
      }
    }
    std::vector<v1::PushAck> received;
    grpc::Status status =
        push_over_one_stream(&stub_->generic, c, std::move(sent), options_.worker_id, &received);
    for (size_t k = 0; k < received.size() && k < pending.size(); ++k) {
      acks[pending[k]] = std::move(received[k]);
    }
    if (status.ok() && received.size() < pending.size()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended before every ack");
    }
    return status;
  });
  if (!s.ok()) return s;
  std::vector<v1::PushAck> ordered;
  for (std::optional<v1::PushAck>& ack : acks) ordered.push_back(std::move(*ack));
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
