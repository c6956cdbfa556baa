// The rollout worker's trajectory groups: what an episode group becomes on the wire.
#include "group_assembly.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

// A stream of `model` model tokens (id 7, log-prob -0.5, version 3) then `env` masked ones.
Sample stream(int model, int env, FinishReason reason = FinishReason::kStop) {
  Sample s;
  for (int i = 0; i < model + env; ++i) {
    const bool from_model = i < model;
    s.token_ids.push_back(from_model ? 7 : 8);
    s.logprobs.push_back(from_model ? -0.5f : 0.0f);
    s.versions.push_back(from_model ? 3 : -1);
    s.from_model.push_back(from_model ? 1 : 0);
  }
  s.finish_reason = reason;
  return s;
}

// Issue 29: an agent episode whose agent rewrote its history (on_rewrite: segment) is pushed as
// its earlier streams, then its last, each a trajectory of the episode's sample index and
// reward; the controller's validation accepts the group when the run trains segments.
TEST(GroupAssemblyTest, AnEpisodesEarlierSegmentsComeFirstWithItsReward) {
  EpisodeGroup group;
  group.request_id = "lease-9";
  group.prompt_ids = {1, 2};
  for (int i = 0; i < 2; ++i) {
    Episode e;
    e.sample = stream(/*model=*/2, /*env=*/1);
    e.turn_ends = {2};
    e.turn_rewards = {0};
    e.prompt_ids = {1, 2, 3};
    group.episodes.push_back(std::move(e));
  }
  Episode& rewritten = group.episodes[0];
  rewritten.reported_reward = 0.25;
  EpisodeSegment earlier;
  earlier.prompt_ids = {4, 5};
  earlier.sample = stream(/*model=*/3, /*env=*/0, FinishReason::kLength);
  earlier.turn_ends = {3};
  earlier.step_seconds = {0.5};
  earlier.tool_calls = 1;
  rewritten.earlier_segments.push_back(earlier);

  std::vector<EpisodeSummary> summaries;
  GroupResult result = as_group_result(std::move(group), &summaries);
  std::vector<rewards::ScoredSample> scored(2);
  scored[0].reward = 1;  // the agent's reported 0.25 replaces it
  scored[1].reward = 0.5;
  v1::PromptLease lease;
  lease.set_lease_id(9);
  lease.set_prompt_index(4);
  buffer::TrajectoryGroup g = trajectory_group("w", lease, result, scored, summaries, 2);

  ASSERT_EQ(g.trajectories.size(), 3u);
  const buffer::Trajectory& first = g.trajectories[0];
  EXPECT_EQ(first.segment, 0);
  EXPECT_EQ(first.sample_index, 0);
  EXPECT_EQ(first.prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(first.response_ids, (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(first.finish_reason, "length");
  EXPECT_EQ(first.tool_calls, 1);
  EXPECT_DOUBLE_EQ(first.reward, 0.25);
  EXPECT_EQ(first.reward_breakdown.at("agent"), 0.25);
  const buffer::Trajectory& last = g.trajectories[1];
  EXPECT_EQ(last.segment, 1);
  EXPECT_EQ(last.sample_index, 0);
  EXPECT_EQ(last.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(last.loss_mask, (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ(last.versions, (std::vector<int32_t>{3, 3, 3}));  // the environment's: the model's
  EXPECT_DOUBLE_EQ(last.reward, 0.25);
  EXPECT_EQ(g.trajectories[2].segment, 0);
  EXPECT_EQ(g.trajectories[2].sample_index, 1);
  EXPECT_DOUBLE_EQ(g.trajectories[2].reward, 0.5);
  EXPECT_EQ(g.rewards(), (std::vector<double>{0.25, 0.5}));

  buffer::ValidationLimits limits;
  limits.vocab_size = 16;
  limits.group_size = 2;
  limits.max_segments = 2;
  EXPECT_TRUE(buffer::validate_group(g, limits, 3).ok());
  limits.max_segments = 1;
  EXPECT_FALSE(buffer::validate_group(g, limits, 3).ok());
}

// Mixture of experts: a sample's routes ride with its trajectory, 1 byte per id below 255
// experts (the engine's "none" as 0xFF) and 2 little-endian bytes otherwise; routes that do not
// cover exactly the trajectory's tokens stay behind.
TEST(GroupAssemblyTest, RoutesGoWithTheirTrajectories) {
  GroupResult result;
  result.prompt_ids = {1, 2};
  result.samples = {stream(2, 0), stream(1, 0)};
  // prompt + response = 4 tokens x (2 layers x 1 expert) ids; the last token's are none.
  result.samples[0].routes = {0, 3, 1, 2, 3, 3, kNoRoute, kNoRoute};
  result.samples[1].routes = {0, 1};  // not 3 tokens' worth
  std::vector<rewards::ScoredSample> scored(2);
  v1::PromptLease lease;
  lease.set_lease_id(1);
  const std::vector<EpisodeSummary> none;
  buffer::TrajectoryGroup g =
      trajectory_group("w", lease, result, scored, none, 2, RouteShape{2, 1, 4});
  const buffer::Trajectory& t = g.trajectories[0];
  EXPECT_EQ(t.route_layers, 2);
  EXPECT_EQ(t.route_k, 1);
  EXPECT_EQ(t.route_bytes, 1);
  EXPECT_EQ(t.routes, (std::vector<uint8_t>{0, 3, 1, 2, 3, 3, 0xFF, 0xFF}));
  EXPECT_EQ(t.route_id(6), -1);
  EXPECT_TRUE(g.trajectories[1].routes.empty());
  EXPECT_EQ(g.trajectories[1].route_bytes, 0);

  buffer::TrajectoryGroup wide =
      trajectory_group("w", lease, result, scored, none, 2, RouteShape{2, 1, 300});
  EXPECT_EQ(wide.trajectories[0].route_bytes, 2);
  ASSERT_EQ(wide.trajectories[0].routes.size(), 16u);
  EXPECT_EQ(wide.trajectories[0].route_id(1), 3);
  EXPECT_EQ(wide.trajectories[0].route_id(7), -1);
  buffer::ValidationLimits limits;
  limits.vocab_size = 100;
  limits.group_size = 2;
  limits.route_layers = 2;
  limits.route_k = 1;
  limits.num_experts = 4;
  EXPECT_TRUE(buffer::validate_group(g, limits, 5).ok());
}

}  // namespace
}  // namespace flywheel::rollout
