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
#include "client_weights_call.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "transport_args.h"
#include "weight_wire.h"

namespace flywheel::buffer {
namespace {

absl::Status from_grpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

using SystemClock = std::chrono::system_clock;

SystemClock::time_point after_seconds(double s) {
  return SystemClock::now() + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

// Times fetch_weights() re-requests a bucket whose checksum failed.
constexpr int kBucketRetries = 3;

// The CRC-32C of `total` bytes from those of their `bucket_bytes` pieces.
uint32_t combine_crcs(const std::vector<uint32_t>& crcs, uint64_t total, uint64_t bucket_bytes) {
  uint32_t crc = 0;
  for (uint64_t i = 0; i < crcs.size(); ++i) {
    crc = core::crc32c_combine(crc, crcs[i], std::min(bucket_bytes, total - i * bucket_bytes));
  }
  return crc;
}

std::vector<uint32_t> bucket_crcs(const std::string& payload, uint64_t bucket_bytes) {
  std::vector<uint32_t> crcs;
  for (uint64_t at = 0; at < payload.size(); at += bucket_bytes) {
    crcs.push_back(core::crc32c_extend(0, payload.data() + at,
                                       std::min<uint64_t>(bucket_bytes, payload.size() - at)));
  }
  return crcs;
}

bool no_weights_yet(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(s.message(), kNoWeightsYet);
}

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

struct ControllerClient::Stub {
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : stub(v1::Controller::NewStub(channel)), generic(channel), weights(channel) {}
  std::unique_ptr<v1::Controller::Stub> stub;
  PushStub generic;     // PushGroups, whose requests wire_codec writes
  WeightsStub weights;  // StreamWeights, whose replies weights_call reads
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

absl::StatusOr<std::optional<core::PublishedWeights>> ControllerClient::fetch_weights(
    int64_t newer_than, double timeout_s) {
  core::PublishedWeights weights;
  FLYWHEEL_ASSIGN_OR_RETURN(bool fetched, fetch_weights_into(newer_than, timeout_s, &weights));
  if (!fetched) return std::nullopt;
  return std::optional<core::PublishedWeights>(std::move(weights));
}

absl::StatusOr<bool> ControllerClient::fetch_weights_into(int64_t newer_than, double timeout_s,
                                                          core::PublishedWeights* out) {
  const SystemClock::time_point deadline = after_seconds(timeout_s);
  const auto timed_out = [&] {
    return absl::DeadlineExceededError(absl::StrCat("fetching weights from the controller at ",
                                                    options_.address, " took longer than ",
                                                    timeout_s, " s"));
  };
  // Runs `call(context)` with the token and the transfer's deadline (and, for unary calls, the
  // per-call one), again after UNAVAILABLE with backoff while attempts and time remain.
  const auto attempt = [&](bool unary, auto&& call) {
    double backoff = options_.backoff_initial_s;
    absl::Status s;
    for (int i = 0; i < options_.max_attempts; ++i) {
      if (SystemClock::now() >= deadline) return timed_out();
      grpc::ClientContext context;
      context.set_deadline(unary ? std::min(deadline, after_seconds(options_.deadline_s))
                                 : deadline);
      if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
      s = call(&context);
      if (s.code() == absl::StatusCode::kDeadlineExceeded && SystemClock::now() >= deadline) {
        return timed_out();
      }
      if (s.code() != absl::StatusCode::kUnavailable || no_weights_yet(s)) return s;
      ++reconnects_;
      const double wait =
          std::min(backoff, std::chrono::duration<double>(deadline - SystemClock::now()).count());
      if (wait <= 0) return timed_out();
      if (stop_.WaitForNotificationWithTimeout(absl::Seconds(wait))) break;
      backoff = std::min(backoff * 2, options_.backoff_max_s);
    }
    return s;
  };

  // Streams `total` bytes of `request`'s version (or of its delta) into `*into` in buckets of
  // `bucket_bytes`, resuming a broken stream, re-requesting bad buckets; checks the whole
  // against `crc` and leaves the buckets' checksums in `*crcs`.
  const auto stream_all = [&](v1::WeightsRequest request, uint64_t total, uint64_t bucket_bytes,
                              uint32_t crc, std::string* into,
                              std::vector<uint32_t>* crcs) -> absl::Status {
    into->resize(total);  // in place when the capacity suffices: no page faults
    WeightsTransfer transfer;
    transfer.version = request.version();
    transfer.bucket_bytes = bucket_bytes;
    transfer.payload = into;
    const uint64_t buckets = (total + bucket_bytes - 1) / bucket_bytes;
    transfer.crcs.assign(buckets, 0);
    transfer.bad.assign(buckets, 0);
    transfer.corrupt = &options_.corrupt_bucket_for_test;
    // Every bucket, resuming after the last one received when the stream breaks.
    uint64_t next = 0;
    FLYWHEEL_RETURN_IF_ERROR(attempt(false, [&](grpc::ClientContext* c) {
      request.set_offset(next);
      return stream_weights_once(&stub_->weights, c, request, &transfer, &next);
    }));
    // The buckets whose checksum failed, again.
    for (uint64_t i = 0; i < buckets; ++i) {
      const uint64_t at = i * bucket_bytes;
      request.set_offset(at);
      request.set_length(std::min(bucket_bytes, total - at));
      for (int retry = 0; transfer.bad[i] && retry < kBucketRetries; ++retry) {
        FLYWHEEL_RETURN_IF_ERROR(attempt(false, [&](grpc::ClientContext* c) {
          uint64_t received_to = 0;
          return stream_weights_once(&stub_->weights, c, request, &transfer, &received_to);
        }));
      }
      if (transfer.bad[i]) {
        return absl::DataLossError(
            absl::StrCat("weights version ", request.version(), request.delta() ? " (delta)" : "",
                         ": bucket ", i, " failed its crc32c ", 1 + kBucketRetries, " times"));
      }
    }
    const uint32_t received = combine_crcs(transfer.crcs, total, bucket_bytes);
    if (received != crc) {
      return absl::DataLossError(absl::StrFormat(
          "weights version %d%s: the payload's crc32c %08x differs from the manifest's %08x",
          request.version(), request.delta() ? " (delta)" : "", received, crc));
    }
    *crcs = std::move(transfer.crcs);
    return absl::OkStatus();
  };

  absl::MutexLock fetching(&fetch_mu_);
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  core::PublishedWeights& weights = *out;
  // A delta applies to what `*out` holds: a version fetched whole and intact (its bucket
  // checksums are cleared before anything overwrites it), the one the caller knows.
  bool try_delta = options_.weight_deltas && weights.version == newer_than &&
                   !weights.bucket_crc32c.empty() && !weights.payload.empty();
  v1::WeightsRequest request;
  request.set_max_bucket_bytes(max_bucket_for(options_.max_message_bytes));
  while (true) {  // once more each time the version being fetched is dropped (NOT_FOUND)
    request.set_latest(true);
    request.clear_version();
    request.clear_offset();
    request.clear_length();
    request.set_delta(try_delta);
    if (try_delta) {
      request.set_delta_from(weights.version);
      request.set_delta_from_crc32c(weights.crc32c);
    }
    v1::WeightsManifest manifest;
    absl::Status s = attempt(true, [&](grpc::ClientContext* c) {
      manifest.Clear();
      return from_grpc(stub_->stub->GetWeightsManifest(c, request, &manifest));
    });
    if (no_weights_yet(s)) return false;
    if (!s.ok()) return s;
    if (manifest.version() <= newer_than) return false;

    std::vector<core::WeightTensor> tensors;
    tensors.reserve(manifest.tensors_size());
    for (const v1::TensorEntry& e : manifest.tensors()) {
      tensors.push_back(
          {e.name(), e.dtype(), {e.shape().begin(), e.shape().end()}, e.offset(), e.size()});
    }
    const uint64_t total = manifest.total_bytes();
    const uint64_t bucket_bytes = manifest.bucket_bytes();
    if (bucket_bytes < 1) return absl::DataLossError("weights manifest: bucket_bytes 0");
    if (absl::Status v = core::validate_tensors(tensors, total); !v.ok()) {
      return absl::DataLossError(absl::StrCat("weights manifest: ", v.message()));
    }
    request.set_latest(false);
    request.set_version(manifest.version());

    if (try_delta && manifest.delta()) {
      // The delta's bytes, applied to the held version, then the result checked against the
      // version's own checksum: a wrong base or a bad delta is fetched whole instead.
      s = absl::OkStatus();
      if (manifest.delta_from() != weights.version || total != weights.payload.size() ||
          !same_layout(tensors, weights.tensors)) {
        s = absl::DataLossError("the delta offered is not from the version held");
      }
      std::vector<uint32_t> delta_crcs;
      if (s.ok()) {
        s = stream_all(request, manifest.delta_bytes(), bucket_bytes, manifest.delta_crc32c(),
                       &delta_bytes_, &delta_crcs);
      }
      if (s.ok()) {
        weights.bucket_crc32c.clear();
        s = apply_weight_delta(delta_bytes_, tensors, &weights.payload, &delta_buffers_);
      }
      std::vector<uint32_t> crcs;
      if (s.ok()) {
        crcs = bucket_crcs(weights.payload, bucket_bytes);
        const uint32_t crc = combine_crcs(crcs, total, bucket_bytes);
        if (crc != manifest.crc32c()) {
          s = absl::DataLossError(absl::StrFormat(
              "weights version %d from the delta of version %d: crc32c %08x, the manifest's %08x",
              manifest.version(), manifest.delta_from(), crc, manifest.crc32c()));
        }
      }
      if (s.ok()) {
        weights.version = manifest.version();
        weights.bucket_bytes = bucket_bytes;
        weights.tensors = std::move(tensors);
        weights.crc32c = manifest.crc32c();
        weights.bucket_crc32c = std::move(crcs);
        ++fetch_counters_.deltas;
        fetch_counters_.bytes += manifest.delta_bytes();
        fetch_counters_.delta_s += elapsed();
        return true;
      }
      const absl::StatusCode code = s.code();
      if (code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kCancelled ||
          code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kUnauthenticated) {
        return s;  // the controller, not the delta
      }
      if (code != absl::StatusCode::kNotFound) {  // not merely replaced by a newer version
        ++fetch_counters_.delta_failures;
        FLYWHEEL_LOG_WARN("weights version %d: %s; fetching it whole", manifest.version(),
                          s.message());
      }
      try_delta = false;
      request.clear_delta();
      request.clear_delta_from();
      request.clear_delta_from_crc32c();
      continue;
    }

    weights.bucket_crc32c.clear();  // from here on `*out` holds no intact version
    weights.version = manifest.version();
    weights.bucket_bytes = bucket_bytes;
    weights.tensors = std::move(tensors);
    request.clear_delta();
    std::vector<uint32_t> crcs;
    s = stream_all(request, total, bucket_bytes, manifest.crc32c(), &weights.payload, &crcs);
    if (s.code() == absl::StatusCode::kNotFound) continue;  // dropped: fetch the newest
    if (!s.ok()) return s;
    weights.crc32c = manifest.crc32c();
    weights.bucket_crc32c = std::move(crcs);
    ++fetch_counters_.full;
    fetch_counters_.bytes += total;
    fetch_counters_.full_s += elapsed();
    return true;
  }
}

ControllerClient::WeightFetchCounters ControllerClient::weight_fetch_counters() const {
  absl::MutexLock lock(&fetch_mu_);
  return fetch_counters_;
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
