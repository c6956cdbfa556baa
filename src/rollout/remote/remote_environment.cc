#include "flywheel/rollout/remote_environment.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/param_reader.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rollout/environment.h"
#include "flywheel/v1/environment.grpc.pb.h"

namespace flywheel::rollout {
namespace {

struct Connection {
  std::string address;
  std::string token;  // "" = none
  double timeout_s = 30;
  std::unique_ptr<v1::Environment::Stub> stub;

  void prepare(grpc::ClientContext* context) const {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(timeout_s)));
    if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  absl::Status error(const char* call, const grpc::Status& s) const {
    return absl::UnavailableError(absl::StrCat("remote environment at ", address, ": ", call,
                                               " failed (", s.error_code(),
                                               "): ", s.error_message()));
  }
};

// The episode's id on the server; Close is sent when the runner lets go of the state.
class RemoteEpisode : public EpisodeState {
 public:
  RemoteEpisode(std::shared_ptr<const Connection> connection, std::string id)
      : connection_(std::move(connection)), id_(std::move(id)) {}
  ~RemoteEpisode() override {
    // Best effort and off the runner's thread: a server that went away must not hold it up.
    std::thread([connection = connection_, id = id_] {
      grpc::ClientContext context;
      connection->prepare(&context);
      v1::CloseRequest request;
      request.set_episode_id(id);
      v1::CloseReply reply;
      (void)connection->stub->Close(&context, request, &reply);
    }).detach();
  }
  const std::string& id() const { return id_; }

 private:
  std::shared_ptr<const Connection> connection_;
  std::string id_;
};

Observation observation_of(const v1::Observation& o) {
  Observation out;
  out.text = o.text();
  out.token_ids.assign(o.token_ids().begin(), o.token_ids().end());
  return out;
}

class RemoteEnvironment : public Environment {
 public:
  static absl::StatusOr<std::unique_ptr<Environment>> create(const EnvironmentSpec& spec) {
    core::ParamReader r(absl::StrCat("environment '", spec.name, "'"), spec.params);
    auto connection = std::make_shared<Connection>();
    connection->address = r.string("address", "");
    connection->timeout_s = r.number_in("timeout_s", 30, 0.001, 86400);
    std::string token_file = r.string("token_file", "");
    FLYWHEEL_RETURN_IF_ERROR(r.finish());
    if (connection->address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment '", spec.name, "': params.address (host:port of the server) is required"));
    }
    if (!token_file.empty()) {
      std::filesystem::path path(token_file);
      if (path.is_relative() && !spec.config_dir.empty()) path = spec.config_dir / path;
      absl::StatusOr<std::string> token = core::read_token_file(path.string());
      if (!token.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("environment '", spec.name, "': cannot read a token from ", path.string(),
                         ": ", token.status().message()));
      }
      connection->token = std::move(*token);
    }
    connection->stub = v1::Environment::NewStub(
        grpc::CreateChannel(connection->address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    connection->prepare(&context);
    context.set_wait_for_ready(false);
    v1::DescribeReply described;
    grpc::Status s = connection->stub->Describe(&context, v1::DescribeRequest(), &described);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::UnavailableError(
          absl::StrCat("remote environment at ", connection->address,
                       " is not reachable (is its server running?): ", s.error_message()));
    }
    if (!s.ok()) return connection->error("Describe", s);
    std::vector<std::string> stops(described.turn_stop_strings().begin(),
                                   described.turn_stop_strings().end());
    return std::unique_ptr<Environment>(new RemoteEnvironment(connection, std::move(stops)));
  }

  absl::StatusOr<EpisodeStart> reset(const core::Json& record) const override {
    const std::string id = absl::StrCat(prefix_, "-", next_.fetch_add(1));
    grpc::ClientContext context;
    connection_->prepare(&context);
    v1::ResetRequest request;
    request.set_episode_id(id);
    request.set_record_json(record.dump());
    v1::ResetReply reply;
    grpc::Status s = connection_->stub->Reset(&context, request, &reply);
    if (!s.ok()) return connection_->error("Reset", s);
    EpisodeStart start;
    start.state = std::make_unique<RemoteEpisode>(connection_, id);
    start.observation = observation_of(reply.observation());
    return start;
  }

  absl::StatusOr<EnvironmentStep> step(EpisodeState* state, const ModelTurn& turn) const override {
    auto* episode = dynamic_cast<RemoteEpisode*>(state);
    if (episode == nullptr) return absl::InternalError("remote environment: no episode state");
    grpc::ClientContext context;
    connection_->prepare(&context);
    v1::StepRequest request;
    request.set_episode_id(episode->id());
    request.set_turn_index(turn.index);
    for (int64_t id : turn.token_ids) request.add_token_ids(id);
    request.set_text(turn.text);
    request.set_truncated(turn.truncated);
    v1::StepReply reply;
    grpc::Status s = connection_->stub->Step(&context, request, &reply);
    if (!s.ok()) return connection_->error("Step", s);
    EnvironmentStep out;
    out.observation = observation_of(reply.observation());
    out.reward = reply.reward();
    out.done = reply.done();
    out.tool_call = reply.tool_call();
    for (const auto& [key, value] : reply.info()) out.info[key] = value;
    return out;
  }

  std::vector<std::string> turn_stop_strings() const override { return stops_; }

 private:
  RemoteEnvironment(std::shared_ptr<const Connection> connection, std::vector<std::string> stops)
      : connection_(std::move(connection)),
        stops_(std::move(stops)),
        prefix_(absl::StrCat(std::random_device()(), "-", std::random_device()())) {}

  std::shared_ptr<const Connection> connection_;
  std::vector<std::string> stops_;
  std::string prefix_;  // episode ids of different runs differ
  mutable std::atomic<int64_t> next_{0};
};

}  // namespace

absl::Status register_remote_environment(core::PluginRegistry& registry) {
  return registry.get<Environment, const EnvironmentSpec&>().add("remote",
                                                                 &RemoteEnvironment::create);
}

}  // namespace flywheel::rollout
