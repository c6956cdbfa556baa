#include "flywheel/buffer/controller_server.h"

#include <chrono>
#include <cstdlib>
#include <deque>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/file_io.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "retry_timer.h"
#include "transport_args.h"
#include "wire_codec.h"

namespace flywheel::buffer {
namespace {

// Constant-time comparison: the time does not depend on where the strings differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

grpc::Status to_grpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<std::string> read_token(const std::string& file, const std::string& env) {
  if (!file.empty()) {
    absl::StatusOr<std::string> text = core::read_file(file);
    if (!text.ok()) return absl::NotFoundError(absl::StrCat("cannot read token file '", file, "'"));
    std::string token(absl::StripAsciiWhitespace(*text));
    if (token.empty()) return absl::NotFoundError(absl::StrCat("token file '", file, "' is empty"));
    return token;
  }
  const char* value = env.empty() ? nullptr : std::getenv(env.c_str());
  if (value == nullptr || *value == '\0') {
    return absl::NotFoundError(absl::StrCat("no token: set ", env, " or a token file"));
  }
  return std::string(value);
}

// Every RPC runs on gRPC's callback API: handlers run on gRPC's own threads with no hand-off to
// a worker pool, and PushGroups reads raw bytes that wire_codec decodes straight into the core's
// vectors.
using CallbackBase = v1::Controller::WithCallbackMethod_Register<
    v1::Controller::WithCallbackMethod_Heartbeat<v1::Controller::WithCallbackMethod_AcquireWork<
        v1::Controller::WithRawCallbackMethod_PushGroups<
            v1::Controller::WithCallbackMethod_ReleaseLease<
                v1::Controller::WithCallbackMethod_GetStatus<
                    v1::Controller::WithCallbackMethod_GetWeightsManifest<
                        v1::Controller::WithCallbackMethod_StreamWeights<
                            v1::Controller::Service>>>>>>>>;

class ControllerServer::Service final : public CallbackBase {
 public:
  Service(ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& o,
          std::function<double()> clock)
      : core_(core), dataset_(dataset), options_(o), clock_(std::move(clock)) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok() && req->worker_id().empty()) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id must not be empty");
    }
    if (s.ok()) {
      core_->heartbeat(req->worker_id(), clock_());
      reply->set_version(core_->version());
      reply->set_group_size(core_->group_size());
      reply->set_heartbeat_interval_s(options_.heartbeat_interval_s);
    }
    return finish(ctx, s);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok()) {
      core_->heartbeat(req->worker_id(), clock_());
      reply->set_version(core_->version());
    }
    return finish(ctx, s);
  }

  grpc::ServerUnaryReactor* AcquireWork(grpc::CallbackServerContext* ctx,
                                        const v1::AcquireWorkRequest* req,
                                        v1::AcquireWorkReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok() && (req->worker_id().empty() || req->max_prompts() < 1)) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "AcquireWork needs a worker_id and max_prompts >= 1");
    }
    if (!s.ok()) return finish(ctx, s);
    Grant grant = core_->acquire(req->worker_id(), req->max_prompts(), clock_());
    reply->set_version(grant.version);
    reply->set_kind(grant.kind == Grant::Kind::kWork   ? v1::AcquireWorkReply::WORK
                    : grant.kind == Grant::Kind::kDone ? v1::AcquireWorkReply::DONE
                                                       : v1::AcquireWorkReply::WAIT);
    for (const Lease& lease : grant.leases) {
      v1::PromptLease* l = reply->add_leases();
      l->set_lease_id(lease.id);
      l->set_epoch(lease.epoch);
      l->set_prompt_index(lease.prompt);
      l->set_prompt_json(dataset_->line(lease.prompt));
    }
    return finish(ctx, s);
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PushGroups(
      grpc::CallbackServerContext* ctx) override {
    return new PushReactor(this, ctx);
  }

  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* ctx,
                                         const v1::ReleaseLeaseRequest* req,
                                         v1::ReleaseLeaseReply*) override {
    grpc::Status s = authorize(ctx);
    return finish(ctx, s.ok() ? to_grpc(core_->release(req->lease_id())) : s);
  }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const v1::StatusRequest*,
                                      v1::StatusReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok()) {
      reply->set_version(core_->version());
      reply->set_in_flight(core_->in_flight());
      reply->set_buffered(core_->buffered());
      reply->set_budget_limit(core_->budget_limit());
      for (const auto& [name, value] : core_->counters().entries()) {
        (*reply->mutable_counters())[name] = value;
      }
    }
    return finish(ctx, s);
  }

  grpc::ServerUnaryReactor* GetWeightsManifest(grpc::CallbackServerContext* ctx,
                                               const v1::WeightsRequest*,
                                               v1::WeightsManifest*) override {
    grpc::Status s = authorize(ctx);
    return finish(ctx, s.ok() ? weights_unimplemented() : s);
  }

  grpc::ServerWriteReactor<v1::WeightsBucket>* StreamWeights(grpc::CallbackServerContext* ctx,
                                                             const v1::WeightsRequest*) override {
    grpc::Status s = authorize(ctx);
    return new FinishedWriter(s.ok() ? weights_unimplemented() : s);
  }

 private:
  // Reads groups one at a time: decode, push (retried from the timer while the buffer is full),
  // queue the ack, read the next. Acks are written in order, one write in flight at a time.
  class PushReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    PushReactor(Service* service, grpc::CallbackServerContext* ctx) : service_(service), ctx_(ctx) {
      grpc::Status s = service_->authorize(ctx);
      if (!s.ok()) {
        finished_ = true;
        Finish(s);
        return;
      }
      StartRead(&request_);
    }

    void OnReadDone(bool ok) override {
      if (!ok) {  // the client finished writing or went away
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish_if_done();
        return;
      }
      grpc::ProtoBufferReader reader(&request_);
      DecodeLimits limits;
      limits.max_trajectories = service_->core_->group_size();
      absl::Status decoded = decode_group(&reader, request_.Length(), limits, &group_);
      request_.Clear();
      group_id_ = group_.group_id;  // group_ is moved into the core by a successful push
      if (!decoded.ok()) {
        acknowledge(decoded);
        return;
      }
      deadline_ = service_->clock_() + service_->options_.push_timeout_s;
      attempt();
    }

    void OnWriteDone(bool ok) override {
      absl::MutexLock lock(&mu_);
      acks_.pop_front();
      if (!ok) acks_.clear();  // the client went away; what it pushed is kept
      if (!acks_.empty()) {
        StartWrite(&acks_.front());
      } else {
        writing_ = false;
        finish_if_done();
      }
    }

    void OnDone() override { delete this; }

   private:
    // Pushes group_; a full buffer is retried every 5 ms until the push deadline or a cancel.
    void attempt() {
      absl::StatusOr<PushOutcome> outcome =
          service_->core_->push(std::move(group_), service_->clock_());
      if (!outcome.ok() && outcome.status().code() == absl::StatusCode::kResourceExhausted &&
          service_->clock_() < deadline_ && !ctx_->IsCancelled()) {
        service_->timer_.schedule(absl::Milliseconds(5), [this] { attempt(); });
        return;
      }
      acknowledge(outcome.status(), outcome.ok() ? push_outcome_name(*outcome) : "");
    }

    // Queues the ack of group_ and reads the next group.
    void acknowledge(const absl::Status& status, const std::string& outcome = "") {
      v1::PushAck ack;
      ack.set_group_id(group_id_);
      ack.set_code(static_cast<int32_t>(status.code()));
      if (status.ok()) {
        ack.set_outcome(outcome);
      } else {
        ack.set_message(std::string(status.message()));
      }
      group_ = TrajectoryGroup();
      const std::string bytes = ack.SerializeAsString();
      grpc::Slice slice(bytes);
      {
        absl::MutexLock lock(&mu_);
        acks_.emplace_back(&slice, 1);
        if (!writing_) {
          writing_ = true;
          StartWrite(&acks_.front());
        }
      }
      StartRead(&request_);
    }

    void finish_if_done() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (reads_done_ && !writing_ && !finished_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
    }

    Service* service_;
    grpc::CallbackServerContext* ctx_;
    grpc::ByteBuffer request_;
    TrajectoryGroup group_;  // being pushed
    std::string group_id_;
    double deadline_ = 0;
    absl::Mutex mu_;
    std::deque<grpc::ByteBuffer> acks_ ABSL_GUARDED_BY(mu_);  // front() is being written
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  // A server stream that ends at once with a status.
  class FinishedWriter final : public grpc::ServerWriteReactor<v1::WeightsBucket> {
   public:
    explicit FinishedWriter(const grpc::Status& status) { Finish(status); }
    void OnDone() override { delete this; }
  };

  static grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx,
                                          const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  static grpc::Status weights_unimplemented() {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "weight publication is not implemented yet (it arrives with the trainer)");
  }

  grpc::Status authorize(grpc::CallbackServerContext* ctx) const {
    if (options_.token.empty()) return grpc::Status::OK;
    const auto& metadata = ctx->client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing authorization token");
    }
    std::string value(it->second.data(), it->second.size());
    std::string prefix = "Bearer ";
    if (!absl::StartsWith(value, prefix) ||
        !same_secret(value.substr(prefix.size()), options_.token)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong authorization token");
    }
    return grpc::Status::OK;
  }

  ControllerCore* core_;
  const PromptDataset* dataset_;
  ControllerServerOptions options_;
  std::function<double()> clock_;
  RetryTimer timer_;
};

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::start(
    ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& options,
    std::function<double()> clock) {
  if (core == nullptr || dataset == nullptr) {
    return absl::InvalidArgumentError("controller server needs a core and a dataset");
  }
  if (dataset->size() != core->num_prompts()) {
    return absl::InvalidArgumentError(absl::StrCat("the dataset has ", dataset->size(),
                                                   " prompts but the controller was built for ",
                                                   core->num_prompts()));
  }
  std::unique_ptr<ControllerServer> server(new ControllerServer());
  server->service_ =
      std::make_unique<Service>(core, dataset, options, clock ? std::move(clock) : &steady_seconds);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.bind_address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  set_transport_args([&](const char* name, int v) { builder.AddChannelArgument(name, v); });
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the controller on '", options.bind_address, "'"));
  }
  return server;
}

std::shared_ptr<grpc::Channel> ControllerServer::in_process_channel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void ControllerServer::shutdown() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

ControllerServer::~ControllerServer() { shutdown(); }

}  // namespace flywheel::buffer
