#include "flywheel/buffer/service/controller_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client_push_call.h"
#include "client_stub.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "transport_args.h"
#include "weight_wire.h"

namespace flywheel::buffer {
namespace {

grpc::ChannelArguments channel_arguments(const ControllerClientOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  if (!o.tls_target_name.empty()) args.SetSslTargetNameOverride(o.tls_target_name);
  set_transport_args([&](const char* name, int v) { args.SetInt(name, v); });
  client_keepalive_args(o.deadline_s, [&](const char* name, int v) { args.SetInt(name, v); });
  // gRPC's own reconnect backoff (1 s growing to 120 s) would fail our retries at once while
  // it waits: a worker started before its controller listens connects on the next retry.
  const int backoff_ms = static_cast<int>(std::max(0.1, o.backoff_max_s) * 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  return args;
}

}  // namespace

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
absl::Status ControllerClient::with_retries(const char* what, Call&& call, bool retry_deadline) {
  double backoff = options_.backoff_initial_s;
  grpc::Status status;
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(options_.deadline_s * 1e6)));
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    status = call(&context);
    // A server shutting down cancels the calls it still runs (CANCELLED): like a broken
    // connection, worth another attempt (a restarted controller may be there by then).
    const bool retry =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::CANCELLED ||
        (retry_deadline && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    const auto now = std::chrono::steady_clock::now();
    if (!retry) {
      if (first_failure && status.ok()) {
        FLYWHEEL_LOG_INFO("the controller answers again, after %.1f s and %d attempts",
                          std::chrono::duration<double>(now - *first_failure).count(), attempt + 1);
      }
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "the controller at %s did not answer %s within buffer.server.rpc_deadline_s (%g s): "
            "%s",
            options_.address, what, options_.deadline_s, status.error_message()));
      }
      return from_grpc(status);
    }
    if (!first_failure) {
      first_failure = now;
      FLYWHEEL_LOG_WARN("the controller did not answer (%s); retrying for up to %g s",
                        status.error_message(), options_.reconnect_timeout_s);
    }
    const bool attempts_left = attempt + 1 < options_.max_attempts;
    const bool time_left =
        std::chrono::duration<double>(now - *first_failure).count() < options_.reconnect_timeout_s;
    ++reconnects_;
    if (!attempts_left && !time_left) {
      // No silent wait: the error says who did not answer what, and for how long.
      const absl::Status last = from_grpc(status);
      return absl::Status(
          last.code(),
          absl::StrFormat("the controller at %s did not answer %s for %.1f s (%d attempts; "
                          "buffer.server.reconnect_timeout_s %g): %s",
                          options_.address, what,
                          std::chrono::duration<double>(now - *first_failure).count(), attempt + 1,
                          options_.reconnect_timeout_s, last.message()));
    }
    if (stop_.WaitForNotificationWithTimeout(absl::Seconds(backoff))) break;
    backoff = std::min(backoff * 2, options_.backoff_max_s);
  }
  return from_grpc(status);
}

bool ControllerClient::is_restart(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StrContains(status.message(), kControllerRestarted);
}

absl::StatusOr<v1::RegisterReply> ControllerClient::register_worker(
    const std::map<std::string, std::string>& capabilities) {
  v1::RegisterRequest request;
  request.set_worker_id(options_.worker_id);
  for (const auto& [k, v] : capabilities) (*request.mutable_capabilities())[k] = v;
  v1::RegisterReply reply;
  absl::Status s = with_retries("Register", [&](grpc::ClientContext* c) {
    return stub_->stub->Register(c, request, &reply);
  });
  if (!s.ok()) return s;
  incarnation_.store(reply.incarnation());
  done_.store(false);
  return reply;
}

absl::StatusOr<v1::AcquireWorkReply> ControllerClient::acquire_work(int64_t max_prompts) {
  v1::AcquireWorkRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_max_prompts(max_prompts);
  request.set_incarnation(incarnation_.load());
  v1::AcquireWorkReply reply;
  absl::Status s = with_retries("AcquireWork", [&](grpc::ClientContext* c) {
    reply.Clear();
    return stub_->stub->AcquireWork(c, request, &reply);
  });
  if (!s.ok()) return s;
  if (reply.kind() == v1::AcquireWorkReply::DONE) done_.store(true);
  return reply;
}

absl::Status ControllerClient::release_lease(
    uint64_t lease_id, bool drop,
    const google::protobuf::RepeatedPtrField<v1::PartialSample>& partial) {
  v1::ReleaseLeaseRequest request;
  request.set_lease_id(lease_id);
  request.set_drop(drop);
  *request.mutable_partial() = partial;
  v1::ReleaseLeaseReply reply;
  return with_retries("ReleaseLease", [&](grpc::ClientContext* c) {
    return stub_->stub->ReleaseLease(c, request, &reply);
  });
}

absl::StatusOr<v1::StatusReply> ControllerClient::status() {
  v1::StatusRequest request;
  v1::StatusReply reply;
  absl::Status s = with_retries("GetStatus", [&](grpc::ClientContext* c) {
    reply.Clear();
    return stub_->stub->GetStatus(c, request, &reply);
  });
  if (!s.ok()) return s;
  return reply;
}

absl::StatusOr<std::vector<v1::PushAck>> ControllerClient::push_groups(
    const std::vector<TrajectoryGroup>& groups) {
  std::vector<std::optional<v1::PushAck>> acks(groups.size());  // by position
  absl::Status s = with_retries(
      "PushGroups",
      [&](grpc::ClientContext* c) {
        std::vector<size_t> pending;  // not acknowledged before a reconnect
        std::vector<const TrajectoryGroup*> sent;
        for (size_t i = 0; i < groups.size(); ++i) {
          if (!acks[i]) {
            pending.push_back(i);
            sent.push_back(&groups[i]);
          }
        }
        std::vector<v1::PushAck> received;
        grpc::Status status = push_over_one_stream(&stub_->generic, c, std::move(sent),
                                                   options_.worker_id, &received);
        for (size_t k = 0; k < received.size() && k < pending.size(); ++k) {
          acks[pending[k]] = std::move(received[k]);
        }
        if (status.ok() && received.size() < pending.size()) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended before every ack");
        }
        return status;
      },
      /*retry_deadline=*/true);
  if (!s.ok()) return s;
  std::vector<v1::PushAck> ordered;
  for (std::optional<v1::PushAck>& ack : acks) ordered.push_back(std::move(*ack));
  return ordered;
}

absl::Status ControllerClient::ack_weights(int64_t version, uint32_t crc32c) {
  v1::AckWeightsRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_version(version);
  request.set_crc32c(crc32c);
  request.set_incarnation(incarnation_.load());
  v1::AckWeightsReply reply;
  return with_retries("AckWeights", [&](grpc::ClientContext* c) {
    return stub_->stub->AckWeights(c, request, &reply);
  });
}

double ControllerClient::silent_for_s() const {
  const double since = silent_since_.load();
  return since == 0 ? 0 : monotonic_seconds() - since;
}

void ControllerClient::start_heartbeats(double interval_s) {
  if (heartbeat_thread_.joinable()) return;
  heartbeat_thread_ = std::thread([this, interval_s] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(interval_s))) {
      v1::HeartbeatRequest request;
      request.set_worker_id(options_.worker_id);
      request.set_incarnation(incarnation_.load());
      v1::HeartbeatReply reply;
      grpc::ClientContext context;
      const double sent_at = monotonic_seconds();
      context.set_deadline(after_seconds(std::min(5.0, options_.deadline_s)));
      if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
      // A missed beat is retried next tick; a restarted controller answers ABORTED until the
      // worker registers again.
      const grpc::Status s = stub_->stub->Heartbeat(&context, request, &reply);
      if (s.ok() && reply.done()) done_.store(true);
      if (is_restart(from_grpc(s))) restart_seen_by_.store(request.incarnation());
      // Silence: no answer at all (another answer, e.g. UNAUTHENTICATED, is not silence).
      const bool unanswered = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                              s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (!unanswered) {
        silent_since_.store(0);
      } else if (silent_since_.load() == 0) {
        silent_since_.store(sent_at);
      }
    }
  });
}

}  // namespace flywheel::buffer
