// The learner step under mpirun (run on 4 ranks: every test also trains on sub-groups of 1 and 2
// ranks, so that rank 0 compares them within one run): parity across rank counts and
// resharding, split invariance for every aggregation mode, memory per rank, skipped updates.
#include "flywheel/trainer/learner.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "../model/test_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner_test_util.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  std::vector<Metrics> steps;
  std::map<std::string, at::Tensor> params;  // full, after the last step
  int64_t local_bytes = 0;
};

LearnerOptions small_options() {
  LearnerOptions o;
  o.lr.lr = 1e-4;
  o.lr.total_steps = 10;
  o.grad_clip = 1.0;
  o.micro_batch_tokens = 64;
  return o;
}

// Trains `steps` steps on `ranks` ranks of the world (the others wait); results on those ranks.
RunResult train(comm::Communicator& world, int ranks, const LearnerOptions& options,
                algos::AggMode agg, int steps, uint64_t data_seed = 1) {
  RunResult result;
  auto sub = world.split(world.rank() < ranks ? 0 : 1, world.rank(), "sub");
  EXPECT_TRUE(sub.ok());
  if (world.rank() >= ranks) return result;
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  auto learner = Learner::create(options, testing::test_algorithm(agg), config, sub->get());
  EXPECT_TRUE(learner.ok()) << learner.status();
  (*learner)->policy().init_random(3);
  for (int s = 0; s < steps; ++s) {
    auto groups = testing::synthetic_groups(data_seed * 100 + s, /*groups=*/8, /*group_size=*/4,
                                            config.vocab_size);
    absl::StatusOr<Metrics> m = (*learner)->step(groups);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) result.steps.push_back(*m);
  }
  (*learner)->policy().for_each_full_bucket(
      1 << 20, at::kFloat, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        for (const auto& [name, t] : bucket) result.params[name] = t;
      });
  result.local_bytes = (*learner)->policy().local_bytes() + (*learner)->optimizer().local_bytes();
  return result;
}

double max_param_diff(const RunResult& a, const RunResult& b) {
  double worst = 0;
  for (const auto& [name, t] : a.params) {
    worst = std::max(worst, (t - b.params.at(name)).abs().max().item<double>());
  }
  return worst;
}

TEST(LearnerTest, SameLossesAndParametersOnOneTwoAndFourRanksWithAndWithoutResharding) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options = small_options();
  options.ppo_epochs = 2;
  options.mini_batches = 2;
  std::vector<std::pair<std::string, RunResult>> runs;
  for (int ranks : {1, 2, 4}) {
    if (ranks > world->size()) continue;
    for (bool reshard : {true, false}) {
      options.sharding.reshard_after_forward = reshard;
      runs.emplace_back(absl::StrCat(ranks, " rank(s), reshard ", reshard),
                        train(*world, ranks, options, algos::AggMode::kTokenMean, /*steps=*/5));
    }
  }
  if (world->rank() != 0) return;
  const RunResult& base = runs.front().second;
  ASSERT_EQ(base.steps.size(), 5u);
  // Training moved the parameters and the loss is not trivially zero.
  EXPECT_GT(std::abs(base.steps[0].at("actor/pg_loss")) + base.steps[0].at("actor/grad_norm"), 0);
  for (const auto& [name, run] : runs) {
    ASSERT_EQ(run.steps.size(), 5u) << name;
    double loss_diff = 0;
    for (int s = 0; s < 5; ++s) {
      // A maximum is the same however the batch is split (a mean of per-rank maxima is not).
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac",
                              "rollout_corr/logprob_abs_diff_max"}) {
        loss_diff = std::max(loss_diff, std::abs(run.steps[s].at(key) - base.steps[s].at(key)));
      }
    }
    const double param_diff = max_param_diff(run, base);
    std::printf("  %s: max |metric diff| %.3g, max |param diff| %.3g after 5 steps\n", name.c_str(),
                loss_diff, param_diff);
    EXPECT_LE(loss_diff, 1e-5) << name;
    EXPECT_LE(param_diff, 1e-5) << name;
  }
}

TEST(LearnerTest, LossAndUpdateDoNotDependOnMicroBatchesOrRanksForEveryAggregation) {
  auto world = flywheel::testing::world_communicator();
  for (algos::AggMode agg :
       {algos::AggMode::kTokenMean, algos::AggMode::kTokenSum, algos::AggMode::kSeqMeanTokenSum,
        algos::AggMode::kSeqMeanTokenMean, algos::AggMode::kSeqMeanTokenSumNorm}) {
    LearnerOptions one = small_options();
    one.micro_batch_tokens = 4096;  // everything in one micro-batch
    LearnerOptions several = small_options();
    several.micro_batch_tokens = 14;  // a few sequences each
    RunResult a = train(*world, 1, one, agg, 1);
    RunResult b = train(*world, 1, several, agg, 1);
    RunResult c = train(*world, std::min(2, world->size()), several, agg, 1);
    if (world->rank() != 0) continue;
    SCOPED_TRACE(algos::agg_mode_name(agg));
    ASSERT_EQ(a.steps.size(), 1u);
    EXPECT_EQ(a.steps[0].at("actor/micro_batches"), 1);
    EXPECT_GE(b.steps[0].at("actor/micro_batches"), 4);
    for (const RunResult* r : {&b, &c}) {
      EXPECT_NEAR(r->steps[0].at("actor/pg_loss"), a.steps[0].at("actor/pg_loss"), 1e-6);
      EXPECT_NEAR(r->steps[0].at("actor/grad_norm"), a.steps[0].at("actor/grad_norm"), 1e-5);
      EXPECT_LE(max_param_diff(*r, a), 1e-6);
    }
    std::printf("  %s: loss %.6f / %.6f / %.6f (1 mb / %g mb / 2 ranks)\n",
                algos::agg_mode_name(agg), a.steps[0].at("actor/pg_loss"),
                b.steps[0].at("actor/pg_loss"), c.steps[0].at("actor/pg_loss"),
                b.steps[0].at("actor/micro_batches"));
  }
}

TEST(LearnerTest, SharedPrefixesGiveTheUnsharedLossesAndUpdates) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options = small_options();
  options.ppo_epochs = 2;
  options.mini_batches = 2;
  for (int ranks : {1, 4}) {
    if (ranks > world->size()) continue;
    options.shared_prefix = false;
    RunResult plain = train(*world, ranks, options, algos::AggMode::kTokenMean, /*steps=*/3);
    options.shared_prefix = true;
    RunResult shared = train(*world, ranks, options, algos::AggMode::kTokenMean, /*steps=*/3);
    if (world->rank() != 0) continue;
    SCOPED_TRACE(absl::StrCat(ranks, " rank(s)"));
    ASSERT_EQ(plain.steps.size(), 3u);
    ASSERT_EQ(shared.steps.size(), 3u);
    double metric_diff = 0;
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(plain.steps[s].at("actor/positions_saved"), 0);
      // Groups of 4 samples of a 2-6 token prompt: a third or more of the positions.
      EXPECT_GT(shared.steps[s].at("actor/positions_saved"), 0.1);
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy",
                              "actor/pg_clipfrac", "rollout_corr/logprob_abs_diff_max"}) {
        metric_diff =
            std::max(metric_diff, std::abs(plain.steps[s].at(key) - shared.steps[s].at(key)));
      }
    }
    const double param_diff = max_param_diff(plain, shared);
    std::printf(
        "  %d rank(s): positions saved %.3f, max |metric diff| %.3g, max |param diff| %.3g\n",
        ranks, shared.steps[0].at("actor/positions_saved"), metric_diff, param_diff);
    EXPECT_LE(metric_diff, 1e-5);
    EXPECT_LE(param_diff, 1e-5);
  }
}

TEST(LearnerTest, ParametersGradientsAndOptimizerStateScaleAsOneOverRanks) {
  auto world = flywheel::testing::world_communicator();
  std::map<int, int64_t> bytes;
  for (int ranks : {1, 2, 4}) {
    if (ranks > world->size()) continue;
    RunResult r = train(*world, ranks, small_options(), algos::AggMode::kTokenMean, 1);
    if (world->rank() == 0) bytes[ranks] = r.local_bytes;
  }
  if (world->rank() != 0) return;
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  const int64_t units = config.num_hidden_layers + 2;
  for (const auto& [ranks, b] : bytes) {
    // 4 float32 copies (parameter, gradient, two moments) of 1/ranks of the model, plus at
    // most ranks - 1 padding elements per unit.
    const double ideal = 16.0 * config.num_parameters() / ranks;
    std::printf("  %d rank(s): %lld bytes per rank (ideal %.0f)\n", ranks,
                static_cast<long long>(b), ideal);
    EXPECT_GE(b, ideal);
    EXPECT_LE(b, ideal + 16.0 * units * (ranks - 1));
  }
}

TEST(LearnerTest, NonFiniteUpdatesAreSkippedThenStopTheRun) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options = small_options();
  options.max_consecutive_skips = 2;
  const model::ModelConfig config = model::testing::tiny_config("llama");
  auto learner = std::move(*Learner::create(
      options, testing::test_algorithm(algos::AggMode::kTokenMean), config, world.get()));
  learner->policy().init_random(3);
  auto groups = testing::synthetic_groups(5, 8, 4, config.vocab_size);
  for (auto& g : groups) g.trajectories[0].reward = NAN;  // NaN advantages, NaN loss
  at::Tensor before = learner->policy().units()[1].shard().detach().clone();
  absl::StatusOr<Metrics> m = learner->step(groups);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at("actor/skipped_updates"), 1);
  EXPECT_TRUE(at::equal(before, learner->policy().units()[1].shard().detach()));
  absl::Status stopped = learner->step(groups).status();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stopped.message()), HasSubstr("2 consecutive policy updates"));
}

TEST(LearnerTest, ASequenceLongerThanTheMicroBatchIsRejectedNotTruncated) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options = small_options();
  options.micro_batch_tokens = 6;
  const model::ModelConfig config = model::testing::tiny_config("qwen3");
  auto learner = std::move(*Learner::create(
      options, testing::test_algorithm(algos::AggMode::kTokenMean), config, world.get()));
  auto groups = testing::synthetic_groups(5, 4, 2, config.vocab_size);
  absl::Status s = learner->step(groups).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trainer.micro_batch_tokens is 6"));
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
