#include "flywheel/buffer/controller_server.h"

#include <chrono>
#include <cstdlib>

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "flywheel/core/file_io.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "push_stream.h"
#include "retry_timer.h"
#include "transport_args.h"

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

// Upper bound of the bytes one PromptLease adds to an AcquireWorkReply: field tag and length
// (<= 6), three varint fields (<= 11 each), the prompt string's tag and length (<= 6).
constexpr int64_t kLeaseOverheadBytes = 6 + 3 * 11 + 6;
// The reply's own fields (kind, version).
constexpr int64_t kReplyOverheadBytes = 32;

}  // namespace

double ControllerServer::monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
    // Grant only what the reply can carry: a lease in a reply that is never sent would hold its
    // prompt until the lease expires.
    GrantBudget budget;
    budget.cost = [this](int64_t prompt) {
      return kLeaseOverheadBytes + static_cast<int64_t>(dataset_->line(prompt).size());
    };
    budget.max_cost = options_.max_message_bytes - kReplyOverheadBytes;
    Grant grant = core_->acquire(req->worker_id(), req->max_prompts(), clock_(), &budget);
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
    return new PushStream({core_, clock_, options_.push_timeout_s, &timer_, &streams_}, ctx,
                          authorize(ctx));
  }

  void close_streams() { streams_.close_all(); }

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
  StreamRegistry<PushStream> streams_;
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
  const int64_t longest = dataset->max_line_bytes() + kLeaseOverheadBytes + kReplyOverheadBytes;
  if (longest > options.max_message_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the longest prompt line (", dataset->max_line_bytes(),
                     " bytes) does not fit in one AcquireWork reply of max_message_bytes (",
                     options.max_message_bytes, ")"));
  }
  std::unique_ptr<ControllerServer> server(new ControllerServer());
  server->shutdown_timeout_s_ = options.shutdown_timeout_s;
  server->service_ = std::make_unique<Service>(core, dataset, options,
                                               clock ? std::move(clock) : &monotonic_seconds);
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
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_streams_per_connection);
  // Bandwidth-delay probing grows a fast stream's receive window past kStreamWindowBytes (it
  // is worth ~40% of large-group throughput), so the transport's buffers are bounded by a memory
  // quota instead: under its pressure gRPC shrinks the windows it offers.
  grpc::ResourceQuota quota("flywheel-controller");
  quota.Resize(static_cast<size_t>(options.transport_memory_bytes));
  builder.SetResourceQuota(quota);
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
  if (!server_) return;
  service_->close_streams();  // idle push streams end now rather than at the deadline
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(shutdown_timeout_s_ * 1e6)));
}

ControllerServer::~ControllerServer() { shutdown(); }

}  // namespace flywheel::buffer
