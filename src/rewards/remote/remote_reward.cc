#include "flywheel/rewards/remote/remote_reward.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"
#include "flywheel/v1/reward.grpc.pb.h"

namespace flywheel::rewards {
namespace {

constexpr double kConnectTimeoutS = 10;
constexpr int kMaxMessageBytes = 256 << 20;

void set_deadline(grpc::ClientContext* context, double seconds) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(seconds)));
}

}  // namespace

absl::StatusOr<RemoteRewardOptions> parse_remote_reward_options(const RewardSpec& spec) {
  ParamReader r(spec);
  RemoteRewardOptions o;
  o.name = spec.name;
  o.address = r.string("address", "");
  o.function = r.string("function", "");
  const std::string token_file = r.string("token_file", "");
  o.timeout_s =
      r.number_in("timeout_s", spec.call_timeout_s > 0 ? spec.call_timeout_s : 60, 0.001, 86400);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (o.address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward '", spec.name,
                     "': option 'address' (host:port of flywheel reward-serve) is "
                     "required"));
  }
  if (!token_file.empty()) {
    std::filesystem::path path(token_file);
    if (path.is_relative() && !spec.config_dir.empty()) path = spec.config_dir / path;
    absl::StatusOr<std::string> token = core::read_token_file(path.string());
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reward '", spec.name, "': option 'token_file': ", token.status().message()));
    }
    o.token = std::move(*token);
  }
  return o;
}

struct RemoteReward::State {
  RemoteRewardOptions options;
  std::unique_ptr<v1::RewardService::Stub> stub;
  std::string function;  // the label asked for
  bool judge = false;

  void prepare(grpc::ClientContext* context, double seconds) const {
    set_deadline(context, seconds);
    if (!options.token.empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", options.token));
    }
  }
  std::string where() const {
    return absl::StrCat("reward '", options.name, "' at ", options.address);
  }
};

RemoteReward::RemoteReward(std::unique_ptr<State> state) : state_(std::move(state)) {}
RemoteReward::~RemoteReward() = default;

absl::StatusOr<std::unique_ptr<RemoteReward>> RemoteReward::create(
    const RemoteRewardOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  state->stub = v1::RewardService::NewStub(
      grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  state->prepare(&context, std::min(options.timeout_s, kConnectTimeoutS));
  context.set_wait_for_ready(true);  // wait for the connection up to the deadline, no longer
  v1::RewardDescribeReply described;
  const grpc::Status s = state->stub->Describe(&context, v1::RewardDescribeRequest(), &described);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(absl::StrCat(state->where(),
                                               " is not reachable (is `flywheel reward-serve` "
                                               "running there?): ",
                                               s.error_message()));
  }
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return absl::PermissionDeniedError(
        absl::StrCat(state->where(), " refused the token: ", s.error_message()));
  }
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat(state->where(), ": Describe failed: ", s.error_message()));
  }
  std::vector<std::string> served(described.functions().begin(), described.functions().end());
  auto found = std::find(served.begin(), served.end(), options.function);
  if (options.function.empty() && served.size() == 1) found = served.begin();
  if (found == served.end()) {
    return absl::NotFoundError(
        absl::StrCat(state->where(), " serves [", absl::StrJoin(served, ", "), "]; ",
                     options.function.empty() ? "name one with option 'function'"
                                              : absl::StrCat("not '", options.function, "'")));
  }
  const size_t at = static_cast<size_t>(found - served.begin());
  state->function = *found;
  state->judge = at < static_cast<size_t>(described.judges_size()) && described.judges(at);
  return std::unique_ptr<RemoteReward>(new RemoteReward(std::move(state)));
}

bool RemoteReward::judge() const { return state_->judge; }

absl::StatusOr<RewardOutput> RemoteReward::score(const RewardInput& input) const {
  std::vector<absl::StatusOr<RewardOutput>> out = score_batch({input});
  return std::move(out.front());
}

std::vector<absl::StatusOr<RewardOutput>> RemoteReward::score_batch(
    const std::vector<RewardInput>& inputs) const {
  const State& s = *state_;
  v1::ScoreRequest request;
  request.set_function(s.function);
  for (const RewardInput& in : inputs) {
    v1::RewardSample* sample = request.add_samples();
    if (in.record != nullptr) sample->set_record_json(in.record->dump());
    sample->set_record_name(std::string(in.record_name));
    sample->set_prompt(std::string(in.prompt));
    sample->set_completion(std::string(in.completion));
    sample->mutable_completion_ids()->Add(in.completion_ids.begin(), in.completion_ids.end());
    sample->set_truncated(in.truncated);
  }
  grpc::ClientContext context;
  s.prepare(&context, s.options.timeout_s);
  v1::ScoreReply reply;
  const grpc::Status status = s.stub->Score(&context, request, &reply);
  std::vector<absl::StatusOr<RewardOutput>> out;
  if (!status.ok() || reply.results_size() != static_cast<int>(inputs.size())) {
    const std::string why = status.ok() ? absl::StrCat("answered ", reply.results_size(),
                                                       " results for ", inputs.size(), " samples")
                                        : absl::StrCat("Score failed (", status.error_code(),
                                                       "): ", status.error_message());
    for (const RewardInput& in : inputs) {
      out.push_back(
          absl::UnavailableError(absl::StrCat(in.record_name, ": ", s.where(), ": ", why)));
    }
    return out;
  }
  for (int i = 0; i < reply.results_size(); ++i) {
    const v1::RewardResult& r = reply.results(i);
    if (!r.error().empty()) {
      out.push_back(absl::InvalidArgumentError(absl::StrCat(s.where(), ": ", r.error())));
      continue;
    }
    RewardOutput o;
    o.score = r.score();
    for (const auto& [name, value] : r.components()) o.components[name] = value;
    o.step_ends.assign(r.step_ends().begin(), r.step_ends().end());
    o.step_rewards.assign(r.step_rewards().begin(), r.step_rewards().end());
    out.push_back(std::move(o));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RewardFunction>> make_remote_reward(const RewardSpec& spec) {
  FLYWHEEL_ASSIGN_OR_RETURN(RemoteRewardOptions options, parse_remote_reward_options(spec));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<RemoteReward> remote, RemoteReward::create(options));
  return std::unique_ptr<RewardFunction>(std::move(remote));
}

}  // namespace flywheel::rewards
