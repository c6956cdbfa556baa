#include "flywheel/rollout/engine_config.h"

#include "flywheel/core/config_loader.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

TEST(EngineConfigTest, MapsTheRolloutSection) {
  auto loaded = core::load_config_text(
      "model: {max_seq_len: 512}\n"
      "rollout: {group_size: 4, max_slots: 12, weight_update: drain, recompute_kv_on_update: "
      "true, logprob_mode: processed, max_prefill_tokens: 100, temperature: 0.5, top_k: 7, "
      "top_p: 0.9, min_p: 0.05, max_new_tokens: 33, stop: ['</answer>'], seed: 9}\n",
      "test.yaml", ".");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EngineOptions o = engine_options_from_config(loaded->config);
  EXPECT_EQ(o.max_slots, 12);
  EXPECT_EQ(o.max_seq_len, 512);
  EXPECT_EQ(o.max_prefill_tokens, 100);
  EXPECT_EQ(o.logprob_mode, LogprobMode::kProcessed);
  EXPECT_TRUE(o.drain_before_update);
  EXPECT_TRUE(o.recompute_kv_on_update);
  SamplingParams p = sampling_params_from_config(loaded->config);
  EXPECT_DOUBLE_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_DOUBLE_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.max_new_tokens, 33);
  EXPECT_EQ(p.stop_strings, std::vector<std::string>{"</answer>"});
  EXPECT_EQ(p.seed, 9u);
  EXPECT_TRUE(p.validate().ok());
}

TEST(EngineConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(engine_options_from_config(core::Config()).validate().ok());
  EXPECT_TRUE(sampling_params_from_config(core::Config()).validate().ok());
}

}  // namespace
}  // namespace flywheel::rollout
