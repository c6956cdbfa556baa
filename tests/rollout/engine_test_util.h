// Test helpers shared by the engine tests: tiny models, engines, greedy requests and a greedy
// reference by full recompute.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../model/test_models.h"
#include "flywheel/rollout/engine.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {

using model::testing::tiny_model;

inline std::shared_ptr<model::DecoderModel> shared_model(const std::string& family,
                                                         uint64_t seed = 1, int threads = 1) {
  return std::shared_ptr<model::DecoderModel>(
      tiny_model(family, at::kFloat, seed, threads).release());
}

inline std::unique_ptr<GenerationEngine> make_engine(std::shared_ptr<model::DecoderModel> model,
                                                     EngineOptions options = {},
                                                     EngineContext context = {}) {
  if (options.max_slots == EngineOptions().max_slots) options.max_slots = 8;
  if (options.max_seq_len == EngineOptions().max_seq_len) options.max_seq_len = 64;
  auto engine = GenerationEngine::create(std::move(model), options, context);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

inline GenerationRequest greedy(const std::string& id, std::vector<int64_t> prompt,
                                int64_t max_new = 8) {
  GenerationRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = max_new;
  return r;
}

// Greedy continuation by full recompute: no cache, one forward per token.
inline std::vector<int64_t> greedy_by_recompute(const model::DecoderModel& m,
                                                std::vector<int64_t> tokens, int64_t steps) {
  std::vector<int64_t> out;
  at::NoGradGuard no_grad;
  for (int64_t i = 0; i < steps; ++i) {
    model::ForwardBatch b;
    const int64_t T = tokens.size();
    b.tokens = at::tensor(tokens, at::kLong).view({1, T});
    b.positions = at::arange(T, at::kLong).view({1, T});
    int64_t next = m.logits(m.forward(b))[0][T - 1].argmax().item<int64_t>();
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

inline std::map<std::string, GroupResult> by_id(std::vector<GroupResult> results) {
  std::map<std::string, GroupResult> out;
  for (auto& r : results) out[r.request_id] = std::move(r);
  return out;
}

inline const std::vector<std::vector<int64_t>> kPrompts = {
    {4, 8, 15, 16, 23, 42}, {7}, {9, 9, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {50, 60}};

}  // namespace flywheel::rollout
