// Rollout routing replay (R3) between the rollout engine and the learner, on a tiny Qwen3-MoE:
// the engine's routes travel in the trajectories as the worker builds them; the learner replays
// them (algorithm.router_replay r3) or only compares them with its router's choices, and
// reports rollout_corr/router_disagreement. With a float32 engine the learner's log-probs of the
// sampled tokens equal the engine's; with a bfloat16 engine some routes differ from the float32
// learner's, and replay makes the learner use the engine's experts. Also the load-balancing
// loss in the learner, and the trainers that refuse it.
#include <ATen/ATen.h>

#include <cstdio>

#include "../model/test_models.h"
#include "engine_groups.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/trainer/dpo_trainer.h"
#include "flywheel/trainer/learner.h"
#include "flywheel/trainer/prm_trainer.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

// Groups sampled by an engine on `model`, with its routes.
std::vector<buffer::TrajectoryGroup> sample_groups(std::shared_ptr<model::DecoderModel> model) {
  testing::EngineSampling sampling;
  sampling.routes = true;
  std::vector<buffer::TrajectoryGroup> groups = testing::engine_groups(model, sampling);
  for (const buffer::TrajectoryGroup& group : groups) {
    for (const buffer::Trajectory& t : group.trajectories) EXPECT_FALSE(t.routes.empty());
  }
  return groups;
}

// One learner step (float32) from `model`'s weights on `groups`: its metrics.
Metrics learner_step(comm::Communicator& world, const model::DecoderModel& model,
                     const std::vector<buffer::TrajectoryGroup>& groups, bool replay) {
  LearnerOptions options;
  options.micro_batch_tokens = 128;
  options.router_replay = replay;
  auto learner = testing::learner_with_weights(world, model, options);
  absl::StatusOr<Metrics> metrics = learner->step(groups);
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : Metrics{};
}

TEST(RouteReplayTest, TheLearnerUsesTheEnginesRoutes) {
  auto world = flywheel::testing::world_communicator();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    std::shared_ptr<model::DecoderModel> model(
        model::testing::tiny_model("qwen3_moe", dtype, 5).release());
    const std::vector<buffer::TrajectoryGroup> groups = sample_groups(model);
    std::map<bool, Metrics> by_replay;
    for (bool replay : {false, true}) {
      const Metrics m = learner_step(*world, *model, groups, replay);
      by_replay[replay] = m;
      if (world->rank() == 0) {
        std::printf(
            "  engine %s, learner float32, replay %s: router disagreement %.4f (without "
            "replay %.4f), |learner - engine log-prob| max %.3g mean %.3g\n",
            c10::toString(dtype), replay ? "r3" : "none", m.at("rollout_corr/router_disagreement"),
            m.at("rollout_corr/router_disagreement_without_replay"),
            m.at("rollout_corr/logprob_abs_diff_max"), m.at("rollout_corr/logprob_abs_diff_mean"));
      }
      if (replay) EXPECT_EQ(m.at("rollout_corr/router_disagreement"), 0.0);
      if (dtype == at::kFloat) EXPECT_LE(m.at("rollout_corr/logprob_abs_diff_max"), 1e-4);
    }
    if (dtype == at::kBFloat16) {
      // bfloat16 rounding flips some of the router's choices against the float32 learner's ...
      EXPECT_GT(by_replay[false].at("rollout_corr/router_disagreement"), 0.0);
      // ... and replaying the engine's routes brings the learner's log-probs closer to its own.
      EXPECT_LT(by_replay[true].at("rollout_corr/logprob_abs_diff_mean"),
                by_replay[false].at("rollout_corr/logprob_abs_diff_mean"));
    }
  }
}

// A config that asks for the load-balancing loss (output_router_logits) gets it in the policy's
// loss, reported as actor/aux_loss; without it there is none.
TEST(RouteReplayTest, TheLearnerAddsTheLoadBalancingLossWhenTheConfigAsks) {
  auto world = flywheel::testing::world_communicator();
  model::ModelConfig config = model::testing::tiny_config("qwen3_moe");
  for (bool asks : {false, true}) {
    config.output_router_logits = asks;
    std::shared_ptr<model::DecoderModel> model(
        model::testing::tiny_model(config, at::kFloat, 5).release());
    const Metrics m = learner_step(*world, *model, sample_groups(model), /*replay=*/true);
    ASSERT_EQ(m.count("actor/aux_loss"), asks ? 1u : 0u);
    if (asks && world->rank() == 0) {
      std::printf("  actor/aux_loss %.4f (num_experts_per_tok 2 when balanced)\n",
                  m.at("actor/aux_loss"));
    }
    if (asks) EXPECT_GT(m.at("actor/aux_loss"), 0.5);
  }
}

// Preference and process-reward training do not add the load-balancing loss, and say so rather
// than train without it.
TEST(RouteReplayTest, TrainersWithoutTheLoadBalancingLossRefuseAConfigThatAsksForIt) {
  auto world = flywheel::testing::world_communicator();
  model::ModelConfig config = model::testing::tiny_config("qwen3_moe");
  config.output_router_logits = true;
  DpoOptions preference;
  preference.optimizer.micro_batch_tokens = 64;
  auto dpo = DpoTrainer::create(preference, config, world.get());
  ASSERT_FALSE(dpo.ok());
  EXPECT_NE(dpo.status().message().find("load-balancing loss"), std::string::npos);
  OptimizerOptions optimizer;
  optimizer.micro_batch_tokens = 64;
  auto prm = ProcessRewardTrainer::create(optimizer, config, world.get());
  ASSERT_FALSE(prm.ok());
  EXPECT_NE(prm.status().message().find("not implement"), std::string::npos);
  config.output_router_logits = false;
  EXPECT_TRUE(ProcessRewardTrainer::create(optimizer, config, world.get()).ok());
}

TEST(RouteReplayTest, ReplayNeedsAMixtureOfExperts) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options;
  options.router_replay = true;
  auto learner = Learner::create(options, testing::test_algorithm(algos::AggMode::kTokenMean),
                                 model::testing::tiny_config("qwen3"), world.get());
  ASSERT_FALSE(learner.ok());
  EXPECT_NE(learner.status().message().find("router_replay"), std::string::npos);
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
