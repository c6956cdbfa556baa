// Reward shaping in the learner step (under mpirun, 1 and 2 ranks): the KL in the reward reaches
// the group estimators' r_i (ALGORITHMS.md §1.2, §4.2) and DAPO's soft overlong punishment is
// applied to every trained trajectory's score (§5.2); process rewards sit where their steps end.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "../model/test_models.h"
#include "flywheel/trainer/learner.h"
#include "gtest/gtest.h"
#include "learner_test_util.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

LearnerOptions shaping_options() {
  LearnerOptions o;
  o.lr.lr = 1e-3;
  o.lr.total_steps = 10;
  o.grad_clip = 0;
  o.micro_batch_tokens = 64;
  return o;
}

std::unique_ptr<Learner> make_learner(comm::Communicator& comm, const LearnerOptions& options) {
  algos::Algorithm algorithm = testing::test_algorithm(algos::AggMode::kTokenMean);
  algorithm.kl_estimator = algos::KlEstimator::kK1;
  auto learner =
      Learner::create(options, std::move(algorithm), model::testing::tiny_config("qwen2"), &comm);
  EXPECT_TRUE(learner.ok()) << learner.status();
  (*learner)->policy().init_random(3);
  if ((*learner)->reference() != nullptr) (*learner)->reference()->init_random(11);
  return std::move(*learner);
}

std::map<std::string, at::Tensor> full_parameters(Learner& learner) {
  std::map<std::string, at::Tensor> params;
  learner.policy().for_each_full_bucket(
      1 << 20, at::kFloat, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        for (const auto& [name, t] : bucket) params[name] = t.clone();
      });
  return params;
}

double max_difference(const std::map<std::string, at::Tensor>& a,
                      const std::map<std::string, at::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : a) {
    worst = std::max(worst, (t - b.at(name)).abs().max().item<double>());
  }
  return worst;
}

// GRPO by hand on per-row rewards r (groups of `group_size` consecutive rows), on `mask`.
at::Tensor grpo_by_hand(const std::vector<double>& r, int64_t group_size, const at::Tensor& mask) {
  std::vector<float> a(r.size());
  for (size_t g = 0; g < r.size(); g += group_size) {
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < group_size; ++i) mean += r[g + i];
    mean /= group_size;
    for (int64_t i = 0; i < group_size; ++i) sq += (r[g + i] - mean) * (r[g + i] - mean);
    const double sd = std::sqrt(sq / (group_size - 1));
    for (int64_t i = 0; i < group_size; ++i) a[g + i] = (r[g + i] - mean) / (sd + 1e-6);
  }
  return at::tensor(a).unsqueeze(1) * mask;
}

TEST(LearnerShapingTest, KlInTheRewardShapesGroupAdvantagesAndTheUpdate) {
  auto world = flywheel::testing::world_communicator();
  constexpr int64_t kGroupSize = 4;
  const auto groups = testing::synthetic_groups(7, /*groups=*/4, kGroupSize, /*vocab=*/97);
  LearnerOptions kl = shaping_options();
  kl.kl_coef = 0.5;
  kl.kl_in_reward = true;
  std::unique_ptr<Learner> shaped = make_learner(*world, kl);
  std::unique_ptr<Learner> plain = make_learner(*world, shaping_options());

  absl::StatusOr<AdvantageTrace> trace = shaped->advantages(groups);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE(trace->old_logprobs.defined() && trace->ref_logprobs.defined());
  const at::Tensor valid = trace->mask.to(at::kBool);
  const at::Tensor kl_tokens = at::where(valid, trace->old_logprobs - trace->ref_logprobs, 0);
  ASSERT_GT(kl_tokens.abs().max().item<double>(), 1e-3) << "the reference equals the policy";

  // r_i = score_i - beta * sum_t (lp_old - lp_ref) (k1), then GRPO over each group.
  std::vector<double> shaped_rewards, rewards;
  for (const auto& g : groups) {
    for (const auto& t : g.trajectories) rewards.push_back(t.reward);
  }
  for (size_t i = 0; i < rewards.size(); ++i) {
    shaped_rewards.push_back(rewards[i] - 0.5 * kl_tokens[i].sum().item<double>());
  }
  const at::Tensor expected = grpo_by_hand(shaped_rewards, kGroupSize, trace->mask);
  EXPECT_LT((trace->advantages - expected).abs().max().item<double>(), 1e-4);

  absl::StatusOr<AdvantageTrace> unshaped = plain->advantages(groups);
  ASSERT_TRUE(unshaped.ok()) << unshaped.status();
  EXPECT_GT((trace->advantages - unshaped->advantages).abs().max().item<double>(), 1e-3);

  // The update follows: kl_coef 0.5 trains as a KL-free learner would on the shaped rewards, and
  // not as one on the raw rewards.
  auto relabelled = groups;
  size_t row = 0;
  for (auto& g : relabelled) {
    for (auto& t : g.trajectories) t.reward = shaped_rewards[row++];
  }
  std::unique_ptr<Learner> by_hand = make_learner(*world, shaping_options());
  ASSERT_TRUE(shaped->step(groups).ok());
  ASSERT_TRUE(plain->step(groups).ok());
  ASSERT_TRUE(by_hand->step(relabelled).ok());
  const auto after_shaped = full_parameters(*shaped);
  EXPECT_GT(max_difference(after_shaped, full_parameters(*plain)), 1e-6);
  EXPECT_LT(max_difference(after_shaped, full_parameters(*by_hand)), 1e-5);
}

TEST(LearnerShapingTest, OverlongResponsesArePenalisedByDaposFormula) {
  auto world = flywheel::testing::world_communicator();
  LearnerOptions options = shaping_options();
  options.overlong_buffer_len = 4;
  options.overlong_penalty_factor = 0.5;
  options.max_response_tokens = 8;
  std::unique_ptr<Learner> learner = make_learner(*world, options);
  const auto groups = testing::synthetic_groups(9, /*groups=*/4, /*group_size=*/4, /*vocab=*/97,
                                                /*max_response=*/8);
  absl::StatusOr<AdvantageTrace> trace = learner->advantages(groups);
  ASSERT_TRUE(trace.ok()) << trace.status();
  int64_t s = 0, penalised = 0;
  double penalty_sum = 0;
  for (const auto& g : groups) {
    for (const auto& t : g.trajectories) {
      const double length = static_cast<double>(t.response_ids.size());
      // 0 up to L_max - L_buf = 4 tokens, then -(L - 4) / 4 * 0.5: -0.5 at L_max.
      const double penalty = std::min(-(length - 4) / 4 * 0.5, 0.0);
      penalised += penalty < 0;
      penalty_sum += penalty;
      EXPECT_NEAR(trace->scores[s++].item<double>(), t.reward + penalty, 1e-12)
          << "length " << length;
    }
  }
  ASSERT_GT(penalised, 0) << "no response reached the buffer zone";
  absl::StatusOr<Metrics> m = learner->step(groups);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->at("reward/overlong_penalty/mean"), penalty_sum / s, 1e-12);

  // Off (the default): the scores are the rewards.
  std::unique_ptr<Learner> off = make_learner(*world, shaping_options());
  absl::StatusOr<AdvantageTrace> raw = off->advantages(groups);
  ASSERT_TRUE(raw.ok());
  s = 0;
  for (const auto& g : groups) {
    for (const auto& t : g.trajectories) EXPECT_EQ(raw->scores[s++].item<double>(), t.reward);
  }
}

// Issue 29: an agent episode cut into segments (segment 0 and 1 of one sample index) is one
// episode of its group: GRPO's mean and std are over the group's episodes, and both segments get
// the episode's advantage; the learner then steps on the variable-size group.
TEST(LearnerShapingTest, SegmentsOfAnEpisodeCountOnceInTheirGroup) {
  auto world = flywheel::testing::world_communicator();
  constexpr int64_t kGroupSize = 4;
  auto groups = testing::synthetic_groups(5, /*groups=*/2, kGroupSize, /*vocab=*/97);
  std::vector<buffer::Trajectory>& ts = groups[0].trajectories;
  for (buffer::Trajectory& t : ts) t.loss_mask.assign(t.loss_mask.size(), 1);
  ts[0].reward = 1;
  ts[1].reward = ts[2].reward = ts[3].reward = 0;
  buffer::Trajectory second = ts[0];  // a further stream of episode 0, with its reward
  second.segment = 1;
  second.response_ids.push_back(5);
  second.loss_mask.push_back(1);
  second.logprobs.push_back(-1.0f);
  second.versions.push_back(0);
  ts.insert(ts.begin() + 1, second);
  std::unique_ptr<Learner> learner = make_learner(*world, shaping_options());
  absl::StatusOr<AdvantageTrace> trace = learner->advantages(groups);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // Episodes {1, 0, 0, 0}: mean 0.25, std 0.5; with the segment counted twice the mean would be
  // 0.4.
  const double high = 0.75 / (0.5 + 1e-6), low = -0.25 / (0.5 + 1e-6);
  const std::vector<double> expected = {high, high, low, low, low};
  for (int64_t row = 0; row < 5; ++row) {
    EXPECT_NEAR(trace->advantages[row][0].item<double>(), expected[row], 1e-5) << "row " << row;
  }
  absl::StatusOr<Metrics> m = learner->step(groups);
  ASSERT_TRUE(m.ok()) << m.status();
}

// Issue 32: process rewards reach token-level estimators where their steps end, as an
// environment's turn rewards do (the same advantages as those turn rewards), change them from the
// outcome-only batch, and leave group estimators' advantages as the row sum gives them;
// grpo_process reads them where their steps end.
TEST(LearnerShapingTest, StepRewardsArePaidWhereTheirStepsEnd) {
  auto world = flywheel::testing::world_communicator();
  constexpr int64_t kGroupSize = 4;
  auto plain = testing::synthetic_groups(5, /*groups=*/2, kGroupSize, /*vocab=*/97);
  for (buffer::TrajectoryGroup& g : plain) {
    for (buffer::Trajectory& t : g.trajectories) {
      while (t.response_ids.size() < 3) {  // room for two steps before the last token
        t.response_ids.push_back(5);
        t.loss_mask.push_back(1);
        t.logprobs.push_back(-1.0f);
        t.versions.push_back(t.versions.empty() ? 0 : t.versions.back());
      }
    }
  }
  auto stepped = plain, turned = plain;
  for (size_t g = 0; g < plain.size(); ++g) {
    for (size_t i = 0; i < plain[g].trajectories.size(); ++i) {
      buffer::Trajectory& s = stepped[g].trajectories[i];
      s.step_ends = {1, 2};
      s.step_rewards = {0.25 * static_cast<double>(i), -0.5};
      buffer::Trajectory& t = turned[g].trajectories[i];
      t.turn_ends = {1, 2};
      t.turn_rewards = s.step_rewards;
    }
  }
  auto advantages = [&](const std::string& estimator,
                        const std::vector<buffer::TrajectoryGroup>& groups) {
    algos::Algorithm a = testing::test_algorithm(algos::AggMode::kTokenMean);
    a.estimator = estimator == "grpo"           ? *algos::make_grpo({})
                  : estimator == "grpo_process" ? *algos::make_grpo_process({})
                                                : *algos::make_reinforce_pp({});
    auto learner = Learner::create(shaping_options(), std::move(a),
                                   model::testing::tiny_config("qwen2"), world.get());
    EXPECT_TRUE(learner.ok()) << learner.status();
    (*learner)->policy().init_random(3);
    absl::StatusOr<AdvantageTrace> trace = (*learner)->advantages(groups);
    EXPECT_TRUE(trace.ok()) << trace.status();
    return trace->advantages;
  };
  const at::Tensor by_steps = advantages("reinforce_pp", stepped);
  EXPECT_LT((by_steps - advantages("reinforce_pp", turned)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((by_steps - advantages("reinforce_pp", plain)).abs().max().item<double>(), 1e-3);
  EXPECT_LT((advantages("grpo", stepped) - advantages("grpo", plain)).abs().max().item<double>(),
            1e-6);
  // grpo_process normalises the rewards where steps end: token 0 (a step's end) counts one more
  // normalised step reward than token 1; turn ends count the same; without steps it is grpo.
  const at::Tensor process = advantages("grpo_process", stepped);
  EXPECT_GT((process.select(1, 0) - process.select(1, 1)).abs().max().item<double>(), 1e-3);
  EXPECT_LT((process - advantages("grpo_process", turned)).abs().max().item<double>(), 1e-6);
  EXPECT_LT(
      (advantages("grpo_process", plain) - advantages("grpo", plain)).abs().max().item<double>(),
      1e-6);
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
