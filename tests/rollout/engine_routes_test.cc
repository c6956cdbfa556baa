// Mixture-of-experts models in the engine: the experts each computed token was routed to are
// kept per sample (prompt included), as a full forward of the same tokens routes them, for
// routing replay by the learner.
#include <ATen/ATen.h>

#include "engine_test_util.h"

namespace flywheel::rollout {
namespace {

GenerationRequest sampled(const std::string& id, std::vector<int64_t> prompt, int64_t n) {
  GenerationRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.n = n;
  r.sampling.temperature = 1.0;
  r.sampling.seed = 3;
  r.sampling.max_new_tokens = 10;
  return r;
}

TEST(EngineRoutesTest, EveryComputedTokenKeepsItsRoutes) {
  auto model = shared_model("qwen3_moe", 5);
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->submit(sampled("a", kPrompts[0], 3)).ok());
  ASSERT_TRUE(engine->submit(sampled("b", kPrompts[3], 2)).ok());
  auto results = by_id(engine->run_until_idle());
  const int64_t width = 2 * 2;  // 2 sparse layers x 2 experts per token
  int checked = 0;
  for (const auto& [id, result] : results) {
    for (const Sample& sample : result.samples) {
      std::vector<int64_t> tokens = result.prompt_ids;
      tokens.insert(tokens.end(), sample.token_ids.begin(), sample.token_ids.end());
      const int64_t T = tokens.size();
      ASSERT_EQ(static_cast<int64_t>(sample.routes.size()), T * width) << id;
      // The last token was sampled, never run.
      for (int64_t j = 0; j < width; ++j) EXPECT_EQ(sample.routes[(T - 1) * width + j], kNoRoute);
      // The rest: what a full forward of the same tokens chooses.
      model::ForwardBatch batch;
      batch.tokens = at::tensor(tokens, at::kLong).narrow(0, 0, T - 1).view({1, T - 1});
      batch.positions = at::arange(T - 1, at::kLong).view({1, T - 1});
      model::RouteRecord record;
      {
        at::NoGradGuard no_grad;
        model->forward(batch, nullptr, &record);
      }
      const at::Tensor full = record.stacked().reshape({-1});
      for (int64_t i = 0; i < (T - 1) * width; ++i) {
        ASSERT_EQ(sample.routes[i], full[i].item<int64_t>()) << id << " id " << i;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5);
}

TEST(EngineRoutesTest, GreedyMixtureOfExpertsDecodingEqualsRecompute) {
  auto model = shared_model("qwen3_moe", 2);
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->submit(greedy("g", kPrompts[2], 12)).ok());
  auto results = by_id(engine->run_until_idle());
  EXPECT_EQ(results.at("g").samples[0].token_ids, greedy_by_recompute(*model, kPrompts[2], 12));
}

TEST(EngineRoutesTest, DenseModelsKeepNone) {
  auto engine = make_engine(shared_model("qwen3"));
  ASSERT_TRUE(engine->submit(sampled("d", kPrompts[0], 2)).ok());
  for (const Sample& s : by_id(engine->run_until_idle()).at("d").samples) {
    EXPECT_TRUE(s.routes.empty());
  }
}

}  // namespace
}  // namespace flywheel::rollout
