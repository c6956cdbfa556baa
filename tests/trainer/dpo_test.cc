// The preference trainer: every DPO-family loss gives the same metrics and parameters with all
// pairs in one micro-batch, in many, and on 2 ranks (its two-pass gradient is exact however the
// pairs are split); training on fixed pairs makes the policy prefer the chosen responses.
#include "flywheel/trainer/dpo_trainer.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <random>

#include "../model/test_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<PreferenceExample> synthetic_pairs(uint64_t seed, int64_t n, int64_t vocab) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return static_cast<int32_t>(lo + static_cast<int64_t>(rng() % (hi - lo + 1)));
  };
  std::vector<PreferenceExample> out(n);
  for (PreferenceExample& e : out) {
    for (int k = uniform(2, 6); k > 0; --k) e.prompt.push_back(uniform(0, vocab - 1));
    for (int k = uniform(1, 8); k > 0; --k) e.chosen.push_back(uniform(0, vocab - 1));
    for (int k = uniform(1, 8); k > 0; --k) e.rejected.push_back(uniform(0, vocab - 1));
  }
  return out;
}

DpoOptions small_options(const char* loss, int64_t micro_batch_tokens) {
  DpoOptions o;
  o.optimizer.lr.lr =
      1e-4;  // as the learner tests: Adam turns float32 sum-order noise into updates of ~lr
  o.optimizer.lr.total_steps = 10;
  o.optimizer.micro_batch_tokens = micro_batch_tokens;
  o.loss.loss = loss;
  o.loss.beta = 0.5;
  o.loss.label_smoothing = std::string(loss) == "sigmoid" ? 0.1 : 0;
  return o;
}

struct DpoRun {
  std::vector<std::map<std::string, double>> steps;
  std::map<std::string, at::Tensor> params;
};

// `steps` steps on `ranks` ranks.
DpoRun train(comm::Communicator& world, int ranks, const DpoOptions& options, int steps) {
  DpoRun run;
  auto sub = world.split(world.rank() < ranks ? 0 : 1, world.rank(), "sub");
  EXPECT_TRUE(sub.ok());
  if (world.rank() >= ranks) return run;
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  auto dpo = DpoTrainer::create(options, config, sub->get());
  EXPECT_TRUE(dpo.ok()) << dpo.status();
  (*dpo)->model().init_random(3);
  // The same 12 pairs every step (pair j on rank j % ranks), their reference the initial
  // weights' log-probs.
  std::vector<PreferenceExample> pairs = synthetic_pairs(100, 12, config.vocab_size);
  std::vector<PreferenceExample*> mine;
  for (size_t j = 0; j < pairs.size(); ++j) {
    if (static_cast<int>(j) % ranks == world.rank()) mine.push_back(&pairs[j]);
  }
  EXPECT_TRUE((*dpo)->set_reference(mine).ok());
  std::vector<const PreferenceExample*> view(mine.begin(), mine.end());
  for (int s = 0; s < steps; ++s) {
    auto m = (*dpo)->step(view);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) run.steps.push_back(*m);
  }
  (*dpo)->model().for_each_full_bucket(
      1 << 20, at::kFloat, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        for (const auto& [name, t] : bucket) run.params[name] = t;
      });
  return run;
}

TEST(DpoTrainerTest, EveryLossIsTheSameInOneOrManyMicroBatchesAndOnTwoRanks) {
  auto world = flywheel::testing::world_communicator();
  for (const char* loss : {"sigmoid", "ipo", "hinge", "simpo"}) {
    DpoRun one = train(*world, 1, small_options(loss, 4096), 3);
    DpoRun many = train(*world, 1, small_options(loss, 16), 3);
    DpoRun two = train(*world, std::min(2, world->size()), small_options(loss, 16), 3);
    if (world->rank() != 0) continue;
    SCOPED_TRACE(loss);
    ASSERT_EQ(one.steps.size(), 3u);
    EXPECT_GT(one.steps[0].at("dpo/grad_norm"), 0);
    EXPECT_EQ(one.steps[0].at("dpo/pairs"), 12);
    double worst_metric = 0, worst_param = 0;
    for (const DpoRun* r : {&many, &two}) {
      ASSERT_EQ(r->steps.size(), 3u);
      for (int s = 0; s < 3; ++s) {
        for (const auto& [name, value] : one.steps[s]) {
          worst_metric = std::max(worst_metric, std::abs(r->steps[s].at(name) - value));
        }
      }
      for (const auto& [name, t] : one.params) {
        worst_param = std::max(worst_param, (r->params.at(name) - t).abs().max().item<double>());
      }
    }
    std::printf("  %s: loss %.6f -> %.6f; max |metric diff| %.3g, max |param diff| %.3g\n", loss,
                one.steps[0].at("dpo/loss"), one.steps[2].at("dpo/loss"), worst_metric,
                worst_param);
    EXPECT_LE(worst_metric, 1e-5);
    EXPECT_LE(worst_param, 1e-5);
  }
}

TEST(DpoTrainerTest, TrainingOnFixedPairsMakesThePolicyPreferTheChosenResponses) {
  auto world = flywheel::testing::world_communicator();
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  for (const char* loss : {"sigmoid", "simpo"}) {
    SCOPED_TRACE(loss);
    DpoOptions options = small_options(loss, 4096);
    options.loss.label_smoothing = 0;
    options.optimizer.lr.lr = 3e-3;
    auto dpo = std::move(*DpoTrainer::create(options, config, world.get()));
    dpo->model().init_random(5);
    std::vector<PreferenceExample> pairs = synthetic_pairs(7, 8, config.vocab_size);
    std::vector<PreferenceExample*> mine;
    for (size_t j = 0; j < pairs.size(); ++j) {
      if (static_cast<int>(j) % world->size() == world->rank()) mine.push_back(&pairs[j]);
    }
    ASSERT_TRUE(dpo->set_reference(mine).ok());
    std::vector<const PreferenceExample*> view(mine.begin(), mine.end());
    const std::map<std::string, double> before = *dpo->evaluate(view);
    for (int s = 0; s < 30; ++s) ASSERT_TRUE(dpo->step(view).ok());
    const std::map<std::string, double> after = *dpo->evaluate(view);
    if (world->rank() == 0) {
      std::printf("  %s: accuracy %.2f -> %.2f, margin %.3f -> %.3f, loss %.4f -> %.4f\n", loss,
                  before.at("rewards/accuracies"), after.at("rewards/accuracies"),
                  before.at("rewards/margins"), after.at("rewards/margins"), before.at("dpo/loss"),
                  after.at("dpo/loss"));
    }
    // At the start the policy is the reference: every pair is a tie, half right.
    if (std::string(loss) == "sigmoid") EXPECT_EQ(before.at("rewards/accuracies"), 0.5);
    EXPECT_EQ(after.at("rewards/accuracies"), 1.0);
    EXPECT_GT(after.at("rewards/margins"), before.at("rewards/margins") + 0.1);
    EXPECT_LT(after.at("dpo/loss"), before.at("dpo/loss"));
    EXPECT_LT(after.at("logps/rejected"), before.at("logps/rejected"));
  }
}

// A pair without its reference on one rank fails the step on every rank (none waits for the
// others in a collective).
TEST(DpoTrainerTest, APairWithoutItsReferenceIsAnErrorOnEveryRank) {
  auto world = flywheel::testing::world_communicator();
  auto dpo = std::move(*DpoTrainer::create(small_options("sigmoid", 4096),
                                           model::testing::tiny_config("qwen2"), world.get()));
  std::vector<PreferenceExample> pairs = synthetic_pairs(9 + world->rank(), 2, 50);
  // Rank 0's pairs get their reference when there are other ranks (theirs do not).
  std::vector<PreferenceExample*> mine = {&pairs[0], &pairs[1]};
  std::vector<PreferenceExample*> none;
  ASSERT_TRUE(dpo->set_reference(world->rank() == 0 && world->size() > 1 ? mine : none).ok());
  std::vector<const PreferenceExample*> view = {&pairs[0], &pairs[1]};
  absl::Status s = dpo->step(view).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no reference log-probs"));
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
