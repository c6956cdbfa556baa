// The server side of the reward service (proto/flywheel/v1/reward.proto), run by
// `flywheel reward-serve`: serves the functions of a CompositeReward (each by its label) to
// RemoteReward clients. Requests are validated (a record that is not a JSON object is that
// sample's error); a function's error or exception is that sample's error; the server never
// fails a call for one bad sample.
//
//   auto server = RewardServer::start(composite, {"127.0.0.1:0", token});
//   std::cout << (*server)->port();
//   (*server)->shutdown();
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/rewards/composite_reward.h"

namespace flywheel::rewards {

struct RewardServerOptions {
  std::string address = "127.0.0.1:0";  // host:port; port 0 = any free port
  std::string token;                    // required as "authorization: Bearer <token>"; "" = none
};

class RewardServer {
 public:
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RewardServer>> start(
      std::shared_ptr<const CompositeReward> rewards, const RewardServerOptions& options);
  ~RewardServer();  // shuts down

  int port() const;
  // Stops accepting calls and waits for those running.
  void shutdown();

 private:
  struct State;
  explicit RewardServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace flywheel::rewards
