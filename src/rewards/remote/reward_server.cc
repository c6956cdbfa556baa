#include "flywheel/rewards/remote/reward_server.h"

#include <exception>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"
#include "flywheel/v1/reward.grpc.pb.h"

namespace flywheel::rewards {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;

class Service final : public v1::RewardService::Service {
 public:
  Service(std::shared_ptr<const CompositeReward> rewards, std::string token)
      : rewards_(std::move(rewards)), token_(std::move(token)) {}

  grpc::Status Describe(grpc::ServerContext* context, const v1::RewardDescribeRequest*,
                        v1::RewardDescribeReply* reply) override {
    if (grpc::Status s = authorize(*context); !s.ok()) return s;
    for (const WeightedReward& part : rewards_->parts()) {
      reply->add_functions(part.label);
      reply->add_judges(part.function->judge());
    }
    return grpc::Status::OK;
  }

  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreReply* reply) override {
    if (grpc::Status s = authorize(*context); !s.ok()) return s;
    const WeightedReward* part = nullptr;
    for (const WeightedReward& p : rewards_->parts()) {
      if (p.label == request->function() ||
          (request->function().empty() && rewards_->parts().size() == 1)) {
        part = &p;
      }
    }
    if (part == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no reward function '", request->function(),
                                       "' is served here (Describe lists them)"));
    }
    const int n = request->samples_size();
    std::vector<core::Json> records(n);
    std::vector<std::string> errors(n);
    std::vector<RewardInput> inputs;
    std::vector<int> index;
    for (int i = 0; i < n; ++i) {
      const v1::RewardSample& s = request->samples(i);
      absl::StatusOr<core::Json> record = s.record_json().empty()
                                              ? absl::StatusOr<core::Json>(core::Json::object())
                                              : core::Json::parse(s.record_json());
      if (!record.ok() || !record->is_object()) {
        errors[i] = absl::StrCat(s.record_name(), ": record_json is not a JSON object");
        continue;
      }
      records[i] = std::move(*record);
      RewardInput in;
      in.record = &records[i];
      in.record_name = s.record_name();
      in.prompt = s.prompt();
      in.completion = s.completion();
      in.completion_ids = absl::MakeConstSpan(s.completion_ids().data(), s.completion_ids_size());
      in.truncated = s.truncated();
      inputs.push_back(in);
      index.push_back(i);
    }
    std::vector<absl::StatusOr<RewardOutput>> outputs;
    try {
      outputs = part->function->score_batch(inputs);
    } catch (const std::exception& e) {
      outputs.assign(inputs.size(), absl::InternalError(absl::StrCat("threw: ", e.what())));
    }
    for (int i = 0; i < n; ++i) reply->add_results()->set_error(errors[i]);
    for (size_t k = 0; k < index.size(); ++k) {
      v1::RewardResult* r = reply->mutable_results(index[k]);
      if (k >= outputs.size() || !outputs[k].ok()) {
        r->set_error(k < outputs.size() ? std::string(outputs[k].status().message())
                                        : "the function returned too few results");
        continue;
      }
      const RewardOutput& o = *outputs[k];
      r->set_score(o.score);
      for (const auto& [name, value] : o.components) (*r->mutable_components())[name] = value;
      for (int32_t end : o.step_ends) r->add_step_ends(end);
      for (double reward : o.step_rewards) r->add_step_rewards(reward);
    }
    return grpc::Status::OK;
  }

 private:
  grpc::Status authorize(const grpc::ServerContext& context) const {
    if (token_.empty()) return grpc::Status::OK;
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end() ||
        std::string(it->second.data(), it->second.size()) != absl::StrCat("Bearer ", token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing or wrong token (authorization: Bearer <token>)");
    }
    return grpc::Status::OK;
  }

  std::shared_ptr<const CompositeReward> rewards_;
  std::string token_;
};

}  // namespace

struct RewardServer::State {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

RewardServer::RewardServer(std::unique_ptr<State> state) : state_(std::move(state)) {}
RewardServer::~RewardServer() { shutdown(); }

absl::StatusOr<std::unique_ptr<RewardServer>> RewardServer::start(
    std::shared_ptr<const CompositeReward> rewards, const RewardServerOptions& options) {
  auto state = std::make_unique<State>();
  state->service = std::make_unique<Service>(std::move(rewards), options.token);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &state->port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(state->service.get());
  state->server = builder.BuildAndStart();
  if (state->server == nullptr || state->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("reward service: cannot listen on ", options.address));
  }
  return std::unique_ptr<RewardServer>(new RewardServer(std::move(state)));
}

int RewardServer::port() const { return state_->port; }

void RewardServer::shutdown() {
  if (state_->server) {
    state_->server->Shutdown();
    state_->server->Wait();
    state_->server.reset();
  }
}

}  // namespace flywheel::rewards
