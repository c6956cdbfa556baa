#include "flywheel/buffer/trajectory.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::buffer {
namespace {

using ::testing::HasSubstr;

TrajectoryGroup good() {
  TrajectoryGroup g;
  g.group_id = "g";
  Trajectory t;
  t.prompt_ids = {1, 2};
  t.response_ids = {3, 4, 5};
  t.loss_mask = {1, 0, 1};
  t.logprobs = {-0.1f, 0.0f, -2.0f};
  t.versions = {3, 3, 4};
  t.reward = 1;
  g.trajectories = {t, t};
  return g;
}

ValidationLimits limits() {
  ValidationLimits l;
  l.vocab_size = 10;
  l.group_size = 2;
  l.max_tokens = 100;
  return l;
}

std::string error(const TrajectoryGroup& g, int64_t version = 4) {
  absl::Status s = validate_group(g, limits(), version);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST(ValidateGroupTest, AcceptsAGoodGroup) {
  EXPECT_TRUE(validate_group(good(), limits(), 4).ok());
  EXPECT_EQ(good().min_version(), 3);
}

TEST(ValidateGroupTest, NamesTheBadField) {
  TrajectoryGroup g = good();
  g.trajectories[1].response_ids[2] = 10;
  EXPECT_THAT(error(g), HasSubstr("trajectories[1].response_ids[2]: id 10 outside the vocabulary"));
  g = good();
  g.trajectories[0].prompt_ids[0] = -1;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].prompt_ids[0]"));
  g = good();
  g.trajectories[0].logprobs.pop_back();
  EXPECT_THAT(error(g), HasSubstr("must have equal lengths"));
  g = good();
  g.trajectories[0].logprobs[1] = NAN;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].logprobs[1]: must be finite and <= 0"));
  g = good();
  g.trajectories[0].logprobs[1] = 0.5f;
  EXPECT_THAT(error(g), HasSubstr("logprobs[1]"));
  g = good();
  g.trajectories[1].reward = INFINITY;
  EXPECT_THAT(error(g), HasSubstr("trajectories[1].reward: must be finite"));
  g = good();
  g.trajectories.pop_back();
  EXPECT_THAT(error(g), HasSubstr("expected 2 trajectories (the group size), got 1"));
  EXPECT_THAT(error(good(), /*version=*/3), HasSubstr("version 4 is outside [0, 3]"));
  g = good();
  g.trajectories[0].prompt_ids.assign(99, 1);
  EXPECT_THAT(error(g), HasSubstr("102 tokens exceed the limit of 100"));
  g = good();
  g.group_id.clear();
  EXPECT_THAT(error(g), HasSubstr("group_id"));
  g = good();
  g.has_baseline = true;
  g.baseline_reward = NAN;
  EXPECT_THAT(error(g), HasSubstr("baseline_reward: must be finite"));
}

// An episode's fields (issue 28): turn ends increasing within the response, one reward per
// turn, finite; tool calls within the turns; step latencies finite and >= 0.
TEST(ValidateGroupTest, EpisodeFieldsAreChecked) {
  TrajectoryGroup g = good();
  Trajectory& t = g.trajectories[0];
  t.turn_ends = {1, 3};
  t.turn_rewards = {0.5, 0};
  t.tool_calls = 1;
  t.env_step_seconds = {0.01f};
  EXPECT_TRUE(validate_group(g, limits(), 4).ok());
  const TrajectoryGroup episode = g;
  g.trajectories[0].turn_rewards.pop_back();
  EXPECT_THAT(error(g), HasSubstr("trajectories[0]: turn_ends (2) and turn_rewards (1)"));
  for (const std::vector<int32_t>& ends : {std::vector<int32_t>{2, 2}, {0, 3}, {1, 4}}) {
    g = episode;
    g.trajectories[0].turn_ends = ends;
    EXPECT_THAT(error(g), HasSubstr("trajectories[0].turn_ends["));
  }
  g = episode;
  g.trajectories[0].turn_rewards[1] = NAN;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].turn_rewards[1]: must be finite"));
  g = episode;
  g.trajectories[0].tool_calls = 3;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].tool_calls: 3 is outside [0, 2]"));
  g = episode;
  g.trajectories[0].env_step_seconds = {-1.0f};
  EXPECT_THAT(error(g), HasSubstr("env_step_seconds[0]: must be finite and >= 0"));
  g = episode;
  g.env_errors = -1;
  EXPECT_THAT(error(g), HasSubstr("env_errors: must be >= 0"));
}

// Process rewards (issue 32): step ends increasing within the response, one finite reward each.
TEST(ValidateGroupTest, StepRewardsAreChecked) {
  TrajectoryGroup g = good();
  g.trajectories[0].step_ends = {1, 2, 3};
  g.trajectories[0].step_rewards = {0.25, 0, -1};
  EXPECT_TRUE(validate_group(g, limits(), 4).ok());
  const TrajectoryGroup stepped = g;
  g.trajectories[0].step_rewards.pop_back();
  EXPECT_THAT(error(g), HasSubstr("trajectories[0]: step_ends (3) and step_rewards (2)"));
  for (const std::vector<int32_t>& ends : {std::vector<int32_t>{1, 1, 3}, {0, 2, 3}, {1, 2, 9}}) {
    g = stepped;
    g.trajectories[0].step_ends = ends;
    EXPECT_THAT(error(g), HasSubstr("trajectories[0].step_ends["));
  }
  g = stepped;
  g.trajectories[0].step_rewards[2] = INFINITY;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].step_rewards[2]: must be finite"));
}

// Mixture-of-experts routes: route_layers x route_k ids of route_bytes bytes per prompt and
// response token, in the model's shape and below its number of experts, or none and every size
// 0; a dense model's run takes none.
TEST(ValidateGroupTest, ExpertRoutesAreChecked) {
  ValidationLimits moe = limits();
  moe.route_layers = 2;
  moe.route_k = 2;
  moe.num_experts = 8;
  auto error = [&](const TrajectoryGroup& g) {
    return std::string(validate_group(g, moe, 4).message());
  };
  TrajectoryGroup g = good();
  Trajectory& t = g.trajectories[0];
  t.route_layers = 2;
  t.route_k = 2;
  t.route_bytes = 1;
  t.routes.assign(/*(2 + 3) tokens x 2 x 2=*/20, 7);
  EXPECT_TRUE(validate_group(g, moe, 4).ok());
  EXPECT_THAT(std::string(validate_group(g, limits(), 4).message()),
              HasSubstr("trajectories[0].routes: this run's model is not a mixture of experts"));
  EXPECT_EQ(t.bytes(), good().trajectories[0].bytes() + 20);
  const TrajectoryGroup routed = g;
  g.trajectories[0].routes[5] = 8;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].routes[5]: expert 8 outside [0, 8)"));
  g = routed;
  g.trajectories[0].route_bytes = 2;
  g.trajectories[0].routes.assign(40, 0xFF);
  EXPECT_TRUE(validate_group(g, moe, 4).ok());

  g = routed;
  g.trajectories[0].routes.pop_back();
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].routes: 19 bytes, expected 20"));
  g = routed;
  g.trajectories[0].routes.resize(60);  // as if 3 layers
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].routes: 60 bytes, expected 20"));
  g = routed;
  g.trajectories[0].route_bytes = 3;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].route_bytes: 3 must be 1 or 2"));
  g = routed;
  g.trajectories[0].route_layers = 3;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].route_layers: 3 layers x 2 experts per "
                                  "token, but the model routes 2 layers x 2"));
  moe.route_layers = 0;  // the shape checks behind the model's
  g = routed;
  g.trajectories[0].route_layers = 0;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].route_layers: 0 must be >= 1"));
  moe.route_layers = 2;
  moe.route_k = -1;
  g = routed;
  g.trajectories[0].route_k = -1;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].route_k: -1 must be >= 1"));
  moe.route_layers = 1 << 16;
  moe.route_k = 2;
  g = routed;
  g.trajectories[0].route_layers = 1 << 16;
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].routes: route_layers (65536) x route_k (2)"));
  moe.route_layers = 1 << 30;  // no overflow: int64 arithmetic
  moe.route_k = 1 << 30;
  g = routed;
  g.trajectories[0] = good().trajectories[0];
  g.trajectories[1].route_layers = 1 << 30;
  g.trajectories[1].route_k = 1 << 30;
  g.trajectories[1].route_bytes = 2;
  g.trajectories[1].routes = {1};
  EXPECT_THAT(error(g), HasSubstr("trajectories[1].routes: route_layers (1073741824)"));
  moe.route_layers = 2;
  moe.route_k = 2;
  g = routed;
  g.trajectories[0].routes.clear();  // sizes without routes: rejected, not ignored
  EXPECT_THAT(error(g), HasSubstr("trajectories[0].routes: empty, but route_layers (2), "
                                  "route_k (2) and route_bytes (1) are not all 0"));
  g = good();
  g.trajectories[1].route_bytes = 1;
  EXPECT_THAT(error(g), HasSubstr("trajectories[1].routes: empty"));
}

TEST(TrajectoryTest, RouteIdReadsLittleEndianIdsAndTheNoneMarker) {
  Trajectory t;
  t.route_bytes = 1;
  t.routes = {0, 5, 0xFE, 0xFF};
  EXPECT_EQ(t.route_id(0), 0);
  EXPECT_EQ(t.route_id(1), 5);
  EXPECT_EQ(t.route_id(2), 254);
  EXPECT_EQ(t.route_id(3), -1);
  t.route_bytes = 2;
  t.routes = {0x05, 0x00, 0x34, 0x12, 0xFF, 0x00, 0xFE, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(t.route_id(0), 5);
  EXPECT_EQ(t.route_id(1), 0x1234);
  EXPECT_EQ(t.route_id(2), 255);  // 0xFF is an id with two bytes
  EXPECT_EQ(t.route_id(3), 0xFFFE);
  EXPECT_EQ(t.route_id(4), -1);
}

// Issue 29: an agent episode cut into segments adds trajectories of its sample index, segments
// 0, 1, ... adjacent and in order; only a run that trains segments accepts them.
TEST(ValidateGroupTest, SegmentsOfAnEpisodeFollowEachOther) {
  TrajectoryGroup g = good();
  g.trajectories[1].sample_index = 1;
  g.trajectories.insert(g.trajectories.begin() + 1, g.trajectories[0]);
  g.trajectories[1].segment = 1;  // episode 0: segments 0 and 1; episode 1: segment 0
  ValidationLimits l = limits();
  EXPECT_THAT(error(g), HasSubstr("this run trains no segments"));
  l.max_segments = 2;
  EXPECT_TRUE(validate_group(g, l, 4).ok());
  EXPECT_EQ(g.rewards().size(), 2u);  // one per episode
  auto bad = [&](const TrajectoryGroup& group, const ValidationLimits& limits) {
    absl::Status s = validate_group(group, limits, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  TrajectoryGroup wrong = g;
  wrong.trajectories[1].segment = 2;
  EXPECT_THAT(bad(wrong, l), HasSubstr("trajectories[1].segment: expected segment 0 or 1"));
  l.max_segments = 3;
  EXPECT_THAT(bad(wrong, l), HasSubstr("trajectories[1].segment"));
  wrong = g;
  wrong.trajectories[1].sample_index = 1;
  EXPECT_THAT(bad(wrong, l), HasSubstr("of episode 0, got segment 1 of episode 1"));
  wrong = g;
  wrong.trajectories[2].sample_index = 3;
  EXPECT_THAT(bad(wrong, l), HasSubstr("trajectories[2].sample_index: expected 1"));
  wrong = g;
  wrong.trajectories.pop_back();
  EXPECT_THAT(bad(wrong, l), HasSubstr("expected 2 episodes (the group size), got 1"));
  l.max_segments = 2;
  wrong = g;
  wrong.trajectories.insert(wrong.trajectories.begin() + 2, wrong.trajectories[1]);
  wrong.trajectories[2].segment = 2;
  EXPECT_THAT(bad(wrong, l), HasSubstr("trajectories[2].segment: 2 is past max_segments (2)"));
}

// An estimator that needs the greedy baseline (remax) makes it required.
TEST(ValidateGroupTest, RequiresTheBaselineWhenAsked) {
  ValidationLimits l = limits();
  l.require_baseline = true;
  TrajectoryGroup g = good();
  absl::Status s = validate_group(g, l, 4);
  EXPECT_THAT(std::string(s.message()), HasSubstr("baseline_reward: missing"));
  g.has_baseline = true;
  g.baseline_reward = 0.5;
  EXPECT_TRUE(validate_group(g, l, 4).ok());
  EXPECT_TRUE(validate_group(g, limits(), 4).ok());  // sent though not needed: accepted
}

}  // namespace
}  // namespace flywheel::buffer
