#include "flywheel/buffer/service/controller_server.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/logging.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "retry_timer.h"
#include "server_push_stream.h"
#include "transport_args.h"
#include "weight_wire.h"

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

google::protobuf::RepeatedPtrField<v1::PartialSample> to_proto(const PartialGeneration& partial) {
  google::protobuf::RepeatedPtrField<v1::PartialSample> out;
  for (const PartialSample& s : partial) {
    v1::PartialSample* p = out.Add();
    p->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    p->mutable_logprobs()->Add(s.logprobs.begin(), s.logprobs.end());
    p->mutable_versions()->Add(s.versions.begin(), s.versions.end());
    p->set_finished(s.finished);
    p->set_finish_reason(s.finish_reason);
  }
  return out;
}

// Ids and versions travel as fixed32: a value of 2^31 or more reads as negative, which
// validate_partial() rejects.
PartialGeneration from_proto(const google::protobuf::RepeatedPtrField<v1::PartialSample>& in) {
  PartialGeneration out;
  for (const v1::PartialSample& p : in) {
    PartialSample s;
    s.token_ids.assign(p.token_ids().begin(), p.token_ids().end());
    s.logprobs.assign(p.logprobs().begin(), p.logprobs().end());
    s.versions.assign(p.versions().begin(), p.versions().end());
    s.finished = p.finished();
    s.finish_reason = p.finish_reason();
    out.push_back(std::move(s));
  }
  return out;
}

void put_varint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7F) | 0x80));
  out->push_back(static_cast<char>(v));
}

void release_weights(void* held) {
  delete static_cast<std::shared_ptr<const core::PublishedWeights>*>(held);
}

// One WeightsBucket holding payload bytes [at, at + size): a small slice with the other fields
// (protobuf's wire format, data last) and the payload's bytes in place, not copied. The data
// slice holds its own reference to the weights, so they outlive every write gRPC still has.
grpc::ByteBuffer encode_bucket(const std::shared_ptr<const core::PublishedWeights>& weights,
                               uint64_t at, uint64_t size, uint32_t crc) {
  std::string header;
  header.push_back(0x08);  // 1: version
  put_varint(static_cast<uint64_t>(weights->version), &header);
  header.push_back(0x10);  // 2: offset
  put_varint(at, &header);
  header.push_back(0x20);  // 4: crc32c
  put_varint(crc, &header);
  header.push_back(0x1A);  // 3: data
  put_varint(size, &header);
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      grpc::Slice(const_cast<char*>(weights->payload.data() + at), size, &release_weights,
                  new std::shared_ptr<const core::PublishedWeights>(weights))};
  return grpc::ByteBuffer(slices, size > 0 ? 2 : 1);
}

// Writes payload bytes [begin, end) of one version in buckets, one write in flight (gRPC's flow
// control paces it). Holds the version, so a newer publication does not free it mid-stream.
class WeightsWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WeightsWriter(std::shared_ptr<const core::PublishedWeights> weights, uint64_t begin, uint64_t end,
                uint64_t bucket_bytes)
      : weights_(std::move(weights)), next_(begin), end_(end), bucket_bytes_(bucket_bytes) {
    write_next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {  // the client went away or the call was cancelled
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "weights stream broken"));
      return;
    }
    write_next();
  }
  void OnDone() override { delete this; }

 private:
  void write_next() {
    if (next_ >= end_) {
      Finish(grpc::Status::OK);
      return;
    }
    const uint64_t size = std::min(bucket_bytes_, end_ - next_);
    buffer_ = encode_bucket(weights_, next_, size, bucket_crc(next_, size));
    next_ += size;
    StartWrite(&buffer_);
  }

  // The publication's checksum of this piece when it is one of its buckets; else computed.
  uint32_t bucket_crc(uint64_t at, uint64_t size) const {
    const core::PublishedWeights& w = *weights_;
    const uint64_t index = at / w.bucket_bytes;
    if (bucket_bytes_ == w.bucket_bytes && at % w.bucket_bytes == 0 &&
        index < w.bucket_crc32c.size() &&
        (size == w.bucket_bytes || at + size == w.payload.size())) {
      return w.bucket_crc32c[index];
    }
    return core::crc32c_extend(0, w.payload.data() + at, size);
  }

  const std::shared_ptr<const core::PublishedWeights> weights_;
  uint64_t next_;
  const uint64_t end_;
  const uint64_t bucket_bytes_;
  grpc::ByteBuffer buffer_;  // the write in flight
};

}  // namespace

double ControllerServer::monotonic_seconds() { return buffer::monotonic_seconds(); }

absl::StatusOr<std::string> read_token(const std::string& file, const std::string& env) {
  if (!file.empty()) return core::read_token_file(file);
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
                        v1::Controller::WithRawCallbackMethod_StreamWeights<
                            v1::Controller::WithCallbackMethod_AckWeights<
                                v1::Controller::Service>>>>>>>>>;

class ControllerServer::Service final : public CallbackBase {
 public:
  Service(ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& o,
          std::function<double()> clock, WeightStore* weights)
      : core_(core), dataset_(dataset), options_(o), clock_(std::move(clock)), weights_(weights) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok() && req->worker_id().empty()) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id must not be empty");
    }
    if (s.ok()) {
      const int64_t reclaimed = core_->register_worker(req->worker_id(), clock_());
      if (reclaimed > 0) {
        FLYWHEEL_LOG_INFO("worker %s registered again; its %d lease(s) from before are re-issued",
                          req->worker_id(), reclaimed);
      }
      reply->set_version(core_->version());
      reply->set_group_size(core_->group_size());
      reply->set_heartbeat_interval_s(options_.heartbeat_interval_s);
      reply->set_incarnation(core_->incarnation());
      reply->set_weights_dtype(options_.weights_dtype);
    }
    return finish(ctx, s);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatReply* reply) override {
    grpc::Status s = authorize(ctx);
    if (s.ok()) s = same_incarnation(req->incarnation());
    if (s.ok()) {
      reply->set_done(core_->heartbeat_done(req->worker_id(), clock_()));
      reply->set_version(core_->version());
      reply->set_incarnation(core_->incarnation());
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
    if (s.ok()) s = same_incarnation(req->incarnation());
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
    reply->set_incarnation(core_->incarnation());
    reply->set_kind(grant.kind == Grant::Kind::kWork   ? v1::AcquireWorkReply::WORK
                    : grant.kind == Grant::Kind::kDone ? v1::AcquireWorkReply::DONE
                                                       : v1::AcquireWorkReply::WAIT);
    for (const Lease& lease : grant.leases) {
      v1::PromptLease* l = reply->add_leases();
      l->set_lease_id(lease.id);
      l->set_epoch(lease.epoch);
      l->set_prompt_index(lease.prompt);
      l->set_prompt_json(dataset_->line(lease.prompt));
      if (lease.partial) *l->mutable_partial() = to_proto(*lease.partial);
    }
    return finish(ctx, s);
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PushGroups(
      grpc::CallbackServerContext* ctx) override {
    return new ServerPushStream({core_, clock_, options_.push_timeout_s, &timer_, &streams_}, ctx,
                                authorize(ctx));
  }

  void close_streams() { streams_.close_all(); }

  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* ctx,
                                         const v1::ReleaseLeaseRequest* req,
                                         v1::ReleaseLeaseReply*) override {
    grpc::Status s = authorize(ctx);
    if (!s.ok()) return finish(ctx, s);
    return finish(
        ctx, to_grpc(core_->release(req->lease_id(), req->drop(), from_proto(req->partial()))));
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
      if (weights_ != nullptr) {
        const WeightStore::AckCounters acks = weights_->ack_counters();
        auto& counters = *reply->mutable_counters();
        counters["weight_acks"] = acks.acks;
        counters["weight_ack_mismatches"] = acks.mismatches;
        counters["weight_acks_rejected"] = acks.rejected;
        counters["weights_version"] = weights_->latest_version();
        const WeightStore::DeltaCounters deltas = weights_->delta_counters();
        counters["weight_deltas_encoded"] = deltas.encoded;
        counters["weight_delta_bytes"] = static_cast<int64_t>(deltas.bytes);
        counters["weight_delta_full_bytes"] = static_cast<int64_t>(deltas.full_bytes);
      }
    }
    return finish(ctx, s);
  }

  grpc::ServerUnaryReactor* GetWeightsManifest(grpc::CallbackServerContext* ctx,
                                               const v1::WeightsRequest* req,
                                               v1::WeightsManifest* reply) override {
    grpc::Status s = authorize(ctx);
    std::shared_ptr<const core::PublishedWeights> w;
    if (s.ok()) s = find_weights(*req, &w);
    if (s.ok()) {
      reply->set_version(w->version);
      for (const core::WeightTensor& t : w->tensors) {
        v1::TensorEntry* e = reply->add_tensors();
        e->set_name(t.name);
        e->set_dtype(t.dtype);
        for (int64_t d : t.shape) e->add_shape(d);
        e->set_offset(t.offset);
        e->set_size(t.size);
      }
      reply->set_total_bytes(w->payload.size());
      reply->set_bucket_bytes(bucket_bytes_for(*w, req->max_bucket_bytes()));
      reply->set_crc32c(w->crc32c);
      if (req->delta()) {
        // Answered when the store's encoder thread has the delta (at once when it is kept):
        // this handler thread goes back to serving meanwhile.
        grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
        weights_->delta_async(w->version, req->delta_from(), req->delta_from_crc32c(),
                              [reactor, reply, from = req->delta_from()](
                                  std::shared_ptr<const core::PublishedWeights> d) {
                                if (d != nullptr) {
                                  reply->set_delta(true);
                                  reply->set_delta_from(from);
                                  reply->set_delta_bytes(d->payload.size());
                                  reply->set_delta_crc32c(d->crc32c);
                                }
                                reactor->Finish(grpc::Status::OK);
                              });
        return reactor;
      }
    }
    return finish(ctx, s);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamWeights(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) override {
    grpc::Status s = authorize(ctx);
    v1::WeightsRequest req;
    if (s.ok()) {
      grpc::ByteBuffer bytes(*request);  // Deserialize consumes its input; this shares the slices
      if (!grpc::SerializationTraits<v1::WeightsRequest>::Deserialize(&bytes, &req).ok()) {
        s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed WeightsRequest");
      }
    }
    std::shared_ptr<const core::PublishedWeights> w;
    if (s.ok()) s = find_weights(req, &w);
    if (s.ok() && req.delta()) {  // the delta's bytes instead of the payload's
      const int64_t version = w->version;
      w = weights_->kept_delta(version, req.delta_from(), req.delta_from_crc32c());
      if (w == nullptr) {
        s = grpc::Status(grpc::StatusCode::NOT_FOUND,
                         absl::StrCat("no delta from weights version ", req.delta_from(), " to ",
                                      version, " is kept (a newer one replaced it)"));
      }
    }
    if (s.ok()) {
      const uint64_t total = w->payload.size();
      if (req.offset() > total || req.length() > total - req.offset()) {
        s = grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                         absl::StrCat("bytes [", req.offset(), ", ", req.offset() + req.length(),
                                      ") are past version ", w->version, "'s ", total, " bytes"));
      }
    }
    if (!s.ok()) return new FinishedWriter(s);
    const uint64_t bucket = bucket_bytes_for(*w, req.max_bucket_bytes());
    const uint64_t end = req.length() == 0 ? w->payload.size() : req.offset() + req.length();
    return new WeightsWriter(std::move(w), req.offset(), end, bucket);
  }

  grpc::ServerUnaryReactor* AckWeights(grpc::CallbackServerContext* ctx,
                                       const v1::AckWeightsRequest* req,
                                       v1::AckWeightsReply*) override {
    grpc::Status s = authorize(ctx);
    if (s.ok() && weights_ == nullptr) s = no_weight_store();
    if (s.ok() && req->worker_id().empty()) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id must not be empty");
    }
    if (s.ok()) s = same_incarnation(req->incarnation());
    if (s.ok()) {
      const absl::Status acked =
          weights_->acknowledge(req->worker_id(), req->version(), req->crc32c());
      if (!acked.ok()) {
        FLYWHEEL_LOG_WARN("weights: worker '%s' acknowledged version %d: rejected (%s)",
                          req->worker_id(), req->version(), acked.ToString());
        s = to_grpc(acked);
      }
    }
    return finish(ctx, s);
  }

 private:
  // A server stream that ends at once with a status.
  class FinishedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
   public:
    explicit FinishedWriter(const grpc::Status& status) { Finish(status); }
    void OnDone() override { delete this; }
  };

  static grpc::Status no_weight_store() {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this controller publishes no weights (weight_sync.transport is not grpc)");
  }

  // ABORTED when a client's incarnation (0: none given) is not this controller's.
  grpc::Status same_incarnation(uint32_t incarnation) const {
    if (incarnation == 0 || incarnation == core_->incarnation()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::ABORTED,
                        absl::StrCat(kControllerRestarted, " (incarnation ", incarnation, " -> ",
                                     core_->incarnation(), "): register again"));
  }

  // The latest when `latest` is set, else `version` if it is still held.
  grpc::Status find_weights(const v1::WeightsRequest& request,
                            std::shared_ptr<const core::PublishedWeights>* out) const {
    if (weights_ == nullptr) return no_weight_store();
    const int64_t version = request.version();
    if (request.latest()) {
      *out = weights_->latest();
      if (*out == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kNoWeightsYet);
      return grpc::Status::OK;
    }
    *out = weights_->get(version);
    if (*out == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("weights version ", version, " is no longer held (latest ",
                                       weights_->latest_version(), ")"));
    }
    return grpc::Status::OK;
  }

  // The publication's bucket size, no larger than a message (or than the client's limit).
  uint64_t bucket_bytes_for(const core::PublishedWeights& w, uint64_t client_max) const {
    uint64_t bucket = std::min(w.bucket_bytes, max_bucket_for(options_.max_message_bytes));
    if (client_max > 0) bucket = std::min(bucket, client_max);
    return std::max<uint64_t>(bucket, 1);
  }

  static grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx,
                                          const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
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
  WeightStore* weights_;  // null: no weight publication
  RetryTimer timer_;
  StreamRegistry<ServerPushStream> streams_;
};

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::start(
    ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& options,
    std::function<double()> clock, WeightStore* weights) {
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
  server->service_ = std::make_unique<Service>(
      core, dataset, options, clock ? std::move(clock) : &monotonic_seconds, weights);
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
