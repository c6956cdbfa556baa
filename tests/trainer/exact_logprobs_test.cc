// Equal log-probs by construction (trainer.exact_logprobs): the learner's proximal pass runs the
// rollout engine's CPU kernels, so that the log-prob it gives each token sampled at its own
// version equals the engine's behaviour log-prob bit for bit, whatever the packing (shared
// prompts or not, one or several rows per micro-batch), the temperature or the rank count. The
// LibTorch pass (exact_logprobs false) is within float32 rounding but not equal: the test
// would catch a kernel or an order that drifted apart.
#include <ATen/ATen.h>

#include <cstdio>

#include "../model/test_models.h"
#include "engine_groups.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

struct Case {
  const char* family;
  double temperature;
  bool shared_prefix;
  int64_t micro_batch_tokens;
};

TEST(ExactLogprobsTest, ProximalLogprobsEqualTheEnginesBitForBit) {
  if (!model::small_gemm_supports(at::kFloat)) GTEST_SKIP() << "no AVX2 / AVX-512 kernels";
  auto world = flywheel::testing::world_communicator();
  const Case cases[] = {{"qwen2", 1.0, true, 4096},
                        {"qwen2", 0.7, false, 48},
                        {"qwen3", 1.0, true, 40},
                        {"llama", 1.3, true, 4096}};
  for (const Case& c : cases) {
    std::shared_ptr<model::DecoderModel> model(
        model::testing::tiny_model(c.family, at::kFloat, 3).release());
    testing::EngineSampling sampling;
    sampling.temperature = c.temperature;
    const std::vector<buffer::TrajectoryGroup> groups = testing::engine_groups(model, sampling);
    for (bool exact : {true, false}) {
      LearnerOptions options;
      options.temperature = c.temperature;
      options.shared_prefix = c.shared_prefix;
      options.micro_batch_tokens = c.micro_batch_tokens;
      options.exact_logprobs = exact;
      options.ppo_epochs = 2;  // a proximal pass with either setting
      auto learner = testing::learner_with_weights(*world, *model, options);
      absl::StatusOr<Metrics> m = learner->step(groups);
      ASSERT_TRUE(m.ok()) << m.status();
      if (world->rank() == 0) {
        std::printf(
            "  %s temperature %.1f shared %d micro-batch %ld, %s: |proximal - "
            "behaviour| max %.3g mean %.3g over %.0f%% of tokens\n",
            c.family, c.temperature, c.shared_prefix, c.micro_batch_tokens,
            exact ? "engine kernels" : "LibTorch",
            m->at("rollout_corr/logprob_abs_diff_equal_version_max"),
            m->at("rollout_corr/logprob_abs_diff_equal_version_mean"),
            100 * m->at("rollout_corr/equal_version_fraction"));
      }
      // Every token was sampled at version 0, the learner's.
      EXPECT_EQ(m->at("rollout_corr/equal_version_fraction"), 1.0);
      if (exact) {
        EXPECT_EQ(m->at("rollout_corr/logprob_abs_diff_equal_version_max"), 0.0) << c.family;
        EXPECT_EQ(m->at("rollout_corr/logprob_abs_diff_max"), 0.0) << c.family;
        EXPECT_EQ(m->at("rollout_corr/is_weight_max"), 1.0) << c.family;
      } else {
        EXPECT_GT(m->at("rollout_corr/logprob_abs_diff_equal_version_max"), 0.0) << c.family;
        EXPECT_LT(m->at("rollout_corr/logprob_abs_diff_equal_version_max"), 1e-4) << c.family;
      }
    }
  }
}

// bfloat16 (trainer.param_dtype and the engine's dtype): the learner gathers its float32 masters
// as the engine's bfloat16 weights and runs the same bfloat16 kernels (AVX512-BF16's, or AVX2's
// widening ones), so behaviour and proximal log-probs are again equal bit for bit.
TEST(ExactLogprobsTest, Bf16ProximalLogprobsEqualTheEnginesBitForBit) {
  if (!model::small_gemm_supports(at::kBFloat16)) GTEST_SKIP() << "no bfloat16 kernels";
  auto world = flywheel::testing::world_communicator();
  for (bool shared_prefix : {true, false}) {
    std::shared_ptr<model::DecoderModel> model(
        model::testing::tiny_model("qwen2", at::kBFloat16, 3).release());
    const std::vector<buffer::TrajectoryGroup> groups = testing::engine_groups(model);
    for (bool exact : {true, false}) {
      LearnerOptions options;
      options.shared_prefix = shared_prefix;
      options.micro_batch_tokens = shared_prefix ? 4096 : 48;
      options.exact_logprobs = exact;
      options.ppo_epochs = 2;
      options.sharding.param_dtype = at::kBFloat16;
      auto learner = testing::learner_with_weights(*world, *model, options);
      absl::StatusOr<Metrics> m = learner->step(groups);
      ASSERT_TRUE(m.ok()) << m.status();
      const double max = m->at("rollout_corr/logprob_abs_diff_equal_version_max");
      if (world->rank() == 0) {
        std::printf("  bfloat16 shared %d, %s: |proximal - behaviour| max %.3g mean %.3g\n",
                    shared_prefix, exact ? "engine kernels" : "LibTorch", max,
                    m->at("rollout_corr/logprob_abs_diff_equal_version_mean"));
      }
      EXPECT_EQ(m->at("rollout_corr/equal_version_fraction"), 1.0);
      if (exact) {
        EXPECT_EQ(max, 0.0) << shared_prefix;
        EXPECT_EQ(m->at("rollout_corr/is_weight_max"), 1.0) << shared_prefix;
      } else {  // LibTorch's bfloat16 ops round elsewhere
        EXPECT_GT(max, 0.0) << shared_prefix;
      }
    }
  }
}

// Only tokens whose sequence was computed at the learner's version up to them count as equal
// version: after a weight update mid-sequence the engine's cache still holds the earlier
// tokens' keys and values of the older version, so the later tokens' behaviour log-probs are
// not the current weights' even where their own version is.
TEST(ExactLogprobsTest, TokensAfterAnOlderOneAreLeftOutOfTheEqualVersionFigures) {
  if (!model::small_gemm_supports(at::kFloat)) GTEST_SKIP() << "no AVX2 / AVX-512 kernels";
  auto world = flywheel::testing::world_communicator();
  std::shared_ptr<model::DecoderModel> model(
      model::testing::tiny_model("qwen2", at::kFloat, 3).release());
  std::vector<buffer::TrajectoryGroup> groups = testing::engine_groups(model);
  int64_t tokens = 0, current = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (buffer::Trajectory& t : groups[g].trajectories) {
      for (size_t j = 0; j < t.versions.size(); ++j) {
        // The learner is at version 1. Groups 0 and 1 were sampled at it; in groups 2 and 3 an
        // update arrived halfway: the first half is version 0, and the second half's behaviour
        // log-probs are moved as stale keys and values would move them.
        const bool updated_midway = g >= 2;
        const bool first_half = 2 * j < t.versions.size();
        t.versions[j] = updated_midway && first_half ? 0 : 1;
        if (updated_midway && !first_half) t.logprobs[j] -= 0.5f;
        tokens += t.loss_mask[j];
        current += updated_midway ? 0 : t.loss_mask[j];
      }
    }
  }
  LearnerOptions options;
  auto learner = testing::learner_with_weights(*world, *model, options);
  learner->set_version(1);
  absl::StatusOr<Metrics> m = learner->step(groups);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->at("rollout_corr/equal_version_fraction"),
              static_cast<double>(current) / static_cast<double>(tokens), 1e-12);
  EXPECT_EQ(m->at("rollout_corr/logprob_abs_diff_equal_version_max"), 0.0);
  EXPECT_GE(m->at("rollout_corr/logprob_abs_diff_max"), 0.5 - 1e-6);
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
