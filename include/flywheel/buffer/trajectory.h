// Trajectories and trajectory groups as the buffer stores them: plain vectors, no LibTorch,
// no protobuf (DESIGN.md §3). Ids and versions are 32-bit, as on the wire (fixed32), so that
// moving a group between the wire and the buffer is a memory copy; a wire value of 2^31 or more
// reads as negative and validation rejects it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::buffer {

struct Trajectory {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> response_ids;
  std::vector<uint8_t> loss_mask;  // per response token: 1 = model token, 0 = environment token
  std::vector<float> logprobs;     // behaviour log-prob per response token
  std::vector<int32_t> versions;   // policy version per response token
  double reward = 0;
  std::map<std::string, double> reward_breakdown;
  std::string finish_reason;  // stop | length | abort | error
  int64_t sample_index = 0;
  // Multi-turn episodes (trajectory.proto); empty for single-turn samples.
  std::vector<int32_t> turn_ends;
  std::vector<double> turn_rewards;
  int32_t tool_calls = 0;
  std::vector<float> env_step_seconds;
  // An agent episode's segment (trajectory.proto): 0, or the index of a further token stream of
  // the episode after its agent rewrote its history.
  int32_t segment = 0;
  // Process rewards (trajectory.proto): step_rewards[k], part of `reward`, is paid at the token
  // just before response index step_ends[k]. Empty for an outcome reward.
  std::vector<int32_t> step_ends;
  std::vector<double> step_rewards;
  // Mixture-of-experts models (trajectory.proto): the experts the engine routed each token of
  // prompt + response to, for routing replay. route_layers x route_k ids per token, each
  // route_bytes (1 or 2) bytes, little-endian; an id with every bit set marks a token the
  // engine did not run (the last one). Empty (and the sizes 0) for dense models.
  std::vector<uint8_t> routes;
  int32_t route_layers = 0;
  int32_t route_k = 0;
  int32_t route_bytes = 0;

  // The expert id at index i of routes (token-major, then layer, then choice); -1 for none.
  int64_t route_id(size_t i) const;
  // Smallest token version; INT64_MAX for an empty response.
  int64_t min_version() const;
  size_t bytes() const;
};

struct TrajectoryGroup {
  std::string group_id;   // unique; a re-push of an acknowledged id is a no-op
  uint64_t lease_id = 0;  // the lease the prompt was granted under
  std::string worker_id;
  int64_t prompt_index = -1;  // the dataset index the lease was for; -1 = not sent
  std::vector<Trajectory> trajectories;
  // The reward of one greedy response to the prompt (estimators that need it, e.g. remax); the
  // greedy response itself is not trained on and not sent.
  bool has_baseline = false;
  double baseline_reward = 0;
  int64_t env_errors =
      0;  // episodes the worker ended with an environment error since its last push

  int64_t min_version() const;  // over all trajectories
  size_t bytes() const;
  // One reward per episode (a segment after the first repeats its episode's reward).
  std::vector<double> rewards() const;
  // The same, of one entry of each trajectory's reward_breakdown (a reward function's label);
  // "" = rewards(). InvalidArgument when a trajectory lacks it.
  absl::StatusOr<std::vector<double>> rewards(const std::string& breakdown_key) const;
};

struct ValidationLimits {
  int64_t vocab_size = 0;        // ids must be < vocab_size (> 0 required)
  int64_t group_size = 0;        // episodes (trajectories unless segmented) per group
  int64_t max_segments = 1;      // trajectories per episode (rollout.agent.max_segments)
  int64_t max_tokens = 1 << 20;  // prompt + response tokens per trajectory
  int64_t max_group_bytes = int64_t{1} << 30;
  // group_id, worker_id and reward_breakdown names: ids are remembered and echoed in acks, so
  // their size bounds what a client can make the controller hold per group.
  int64_t max_id_bytes = 256;
  bool require_baseline = false;  // the estimator needs baseline_reward (remax)
  // Mixture-of-experts models: routes must have route_layers x route_k ids per token, each below
  // num_experts (or the "none" id). 0 (a dense model): trajectories carry no routes.
  int64_t route_layers = 0;
  int64_t route_k = 0;
  int64_t num_experts = 0;
};

// InvalidArgument naming the field ("trajectories[2].logprobs[5]: ..."): ids outside the
// vocabulary, lengths of response_ids / logprobs / versions / loss_mask that differ, non-finite
// or positive log-probs, non-finite rewards, a missing (when required) or non-finite
// baseline_reward, a wrong group size or segment layout (every sample index from 0 to
// group_size - 1, each with its segments 0, 1, ... adjacent and in order, at most max_segments;
// segments only when max_segments > 1), token versions above
// `current_version` (from the future) or negative, sizes above the limits (ids and reward names
// longer than max_id_bytes included), expert routes whose size is not (prompt + response tokens)
// x route_layers x route_k x route_bytes (route_bytes 1 or 2, route_layers x route_k at most
// 65536) or, without routes, route sizes other than 0. Expert ids are not checked here (the
// learner checks them against the model).
absl::Status validate_group(const TrajectoryGroup& group, const ValidationLimits& limits,
                            int64_t current_version);

}  // namespace flywheel::buffer
