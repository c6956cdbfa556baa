#include "flywheel/algos/presets.h"

#include "flywheel/algos/algorithm.h"
#include "flywheel/core/builtins.h"
#include "flywheel/core/plugin_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::algos {
namespace {

using ::testing::HasSubstr;

core::LoadedConfig load(const std::string& yaml) {
  auto loaded = core::load_config_text(yaml, "t.yaml", ".");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(apply_algorithm_preset(&*loaded).ok());
  return *loaded;
}

TEST(PresetTest, EachPresetExpandsToItsDocumentedDefaults) {
  struct Expect {
    const char* name;
    const char* estimator;
    const char* loss;
    const char* agg;
    double clip_low, clip_high, clip_c, kl_coef;
    bool kl_in_reward;
    const char* filter;
  };
  for (const Expect& e : std::vector<Expect>{
           {"ppo", "gae", "ppo_clip", "token-mean", 0.2, 0.2, 3, 0.001, true, ""},
           {"grpo", "grpo", "ppo_clip", "token-mean", 0.2, 0.2, 3, 0.001, false, ""},
           {"dapo", "grpo", "ppo_clip", "token-mean", 0.2, 0.28, 3, 0, false, "nonzero_reward_std"},
           {"dr_grpo", "dr_grpo", "ppo_clip", "seq-mean-token-sum-norm", 0.2, 0.2, 3, 0, false, ""},
           {"gspo", "grpo", "gspo", "seq-mean-token-mean", 3e-4, 4e-4, 0, 0, false, ""},
           {"rloo", "rloo", "ppo_clip", "token-mean", 0.2, 0.2, 3, 0, false, ""},
           {"reinforce_pp", "reinforce_pp", "ppo_clip", "token-mean", 0.2, 0.2, 3, 0.001, true, ""},
           {"remax", "remax", "ppo_clip", "token-mean", 0.2, 0.2, 3, 0, false, ""},
       }) {
    core::LoadedConfig c = load(std::string("algorithm: {name: ") + e.name + "}\n");
    const core::AlgorithmOptions& a = c.config.algorithm;
    EXPECT_EQ(a.advantage_estimator, e.estimator) << e.name;
    EXPECT_EQ(a.policy_loss, e.loss) << e.name;
    EXPECT_EQ(a.loss_agg_mode, e.agg) << e.name;
    EXPECT_DOUBLE_EQ(a.clip_low, e.clip_low) << e.name;
    EXPECT_DOUBLE_EQ(a.clip_high, e.clip_high) << e.name;
    EXPECT_DOUBLE_EQ(a.clip_c, e.clip_c) << e.name;
    EXPECT_DOUBLE_EQ(a.kl_coef, e.kl_coef) << e.name;
    EXPECT_EQ(a.kl_in_reward, e.kl_in_reward) << e.name;
    EXPECT_EQ(c.config.buffer.filter, e.filter) << e.name;
  }
}

TEST(PresetTest, ExplicitKeysWinOverThePreset) {
  core::LoadedConfig c = load(
      "algorithm: {name: dapo, clip_high: 0.3, is_correction: icepop}\n"
      "buffer: {filter: ''}\nrollout: {max_new_tokens: 1000}\n");
  EXPECT_DOUBLE_EQ(c.config.algorithm.clip_high, 0.3);
  EXPECT_EQ(c.config.algorithm.is_correction, "icepop");
  EXPECT_EQ(c.config.buffer.filter, "");
  EXPECT_EQ(c.config.algorithm.overlong_buffer_len, 200);  // max_new_tokens / 5
}

TEST(PresetTest, DrGrpoConstantIsTheMaximumResponseLength) {
  core::LoadedConfig c = load("algorithm: {name: dr_grpo}\nrollout: {max_new_tokens: 777}\n");
  EXPECT_DOUBLE_EQ(c.config.algorithm.loss_agg_constant, 777);
}

TEST(AlgorithmTest, BuildsComponentsFromTheRegistries) {
  core::PluginRegistry registry;
  ASSERT_TRUE(register_algos_builtins(registry).ok());
  core::LoadedConfig c = load("algorithm: {name: gspo}\n");
  auto algorithm = Algorithm::create(c.config, registry);
  ASSERT_TRUE(algorithm.ok()) << algorithm.status();
  EXPECT_EQ(algorithm->agg, AggMode::kSeqMeanTokenMean);
  c.config.algorithm.policy_loss = "ppo_clipp";
  absl::Status status = Algorithm::create(c.config, registry).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("algorithm.policy_loss: unknown policy_loss 'ppo_clipp'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("did you mean 'ppo_clip'?"));
}

TEST(AlgorithmTest, GrpoProcessRefusesAKlPenaltyInTheReward) {
  core::PluginRegistry registry;
  ASSERT_TRUE(register_algos_builtins(registry).ok());
  core::LoadedConfig c =
      load("algorithm: {name: reinforce_pp, advantage_estimator: grpo_process, kl_coef: 0.01}\n");
  absl::Status status = Algorithm::create(c.config, registry).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("algorithm.kl_in_reward: grpo_process reads rewards only where steps end"));
  c.config.algorithm.kl_in_reward = false;  // the KL in the loss
  EXPECT_TRUE(Algorithm::create(c.config, registry).ok());
  c.config.algorithm.kl_in_reward = true;
  c.config.algorithm.kl_coef = 0;  // no KL at all
  EXPECT_TRUE(Algorithm::create(c.config, registry).ok());
}

}  // namespace
}  // namespace flywheel::algos
