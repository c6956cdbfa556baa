// A reward function served by another process over gRPC (proto/flywheel/v1/reward.proto): the
// client side of `flywheel reward-serve`. One judge (or reward model) serves many rollout
// workers: each worker's `llm_judge` with `params.address` scores through it.
//
//   rewards:
//     functions:
//       - {name: llm_judge, params: {address: "judge-host:50061", token_file: judge.token}}
//
// Samples go in one call per batch, with the deadline `timeout_s` (default: rewards.timeout_s).
// A call that fails (the server went away, the deadline passed) is every sample's error: they
// score the fallback and are counted, and scoring goes on. A server that cannot be reached when
// the client starts is an error at start naming the address.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards {

struct RemoteRewardOptions {
  std::string name = "llm_judge";  // the reward's name, in errors
  std::string address;             // host:port of `flywheel reward-serve`
  std::string function;            // a label the server serves; "" = its only one
  std::string token;               // sent as "authorization: Bearer <token>"; "" = none
  double timeout_s = 60;           // each call's deadline
};

// Reads `spec.params` strictly: address (required), function, token_file (relative to
// spec.config_dir), timeout_s (default spec.call_timeout_s, else 60).
absl::StatusOr<RemoteRewardOptions> parse_remote_reward_options(const RewardSpec& spec);

class RemoteReward : public RewardFunction {
 public:
  // Connects and asks the server what it serves. Unavailable naming the address when it does not
  // answer within timeout_s (or 10 s, the smaller); NotFound when it does not serve `function`
  // (or serves several and none is named); PermissionDenied for a refused token.
  static absl::StatusOr<std::unique_ptr<RemoteReward>> create(const RemoteRewardOptions& options);
  ~RemoteReward() override;

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override;
  std::vector<absl::StatusOr<RewardOutput>> score_batch(
      const std::vector<RewardInput>& inputs) const override;
  bool batched() const override { return true; }
  bool judge() const override;  // as the server says of its function

 private:
  struct State;
  explicit RemoteReward(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// parse_remote_reward_options() then RemoteReward::create().
absl::StatusOr<std::unique_ptr<RewardFunction>> make_remote_reward(const RewardSpec& spec);

}  // namespace flywheel::rewards
