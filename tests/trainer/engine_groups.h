// Trajectory groups sampled by a real GenerationEngine, as the rollout worker sends them to the
// learner, and a learner loaded with the engine's weights: for tests of what the engine and the
// learner must agree on (routes, log-probs).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "flywheel/rollout/engine.h"
#include "flywheel/trainer/learner.h"
#include "group_assembly.h"
#include "gtest/gtest.h"
#include "learner_test_util.h"

namespace flywheel::trainer::testing {

struct EngineSampling {
  double temperature = 1.0;
  int64_t max_new_tokens = 16;
  bool routes = false;  // mixture of experts: the trajectories carry the engine's routes
};

// Groups of 4 samples of 4 prompts (1 to 6 tokens) from an engine on `model`, rewards 0 / 1.
inline std::vector<buffer::TrajectoryGroup> engine_groups(
    std::shared_ptr<model::DecoderModel> model, const EngineSampling& sampling = {}) {
  rollout::EngineOptions options;
  options.max_slots = 16;
  options.max_seq_len = 64;
  auto engine = std::move(*rollout::GenerationEngine::create(model, options, {}));
  const std::vector<std::vector<int64_t>> prompts = {
      {4, 8, 15, 16, 23, 42}, {7, 1}, {9, 9, 9}, {50, 60, 70, 80, 90}};
  for (size_t p = 0; p < prompts.size(); ++p) {
    rollout::GenerationRequest r;
    r.id = std::to_string(p);
    r.prompt_ids = prompts[p];
    r.n = 4;
    r.sampling.temperature = sampling.temperature;
    r.sampling.seed = 11 + p;
    r.sampling.max_new_tokens = sampling.max_new_tokens;
    EXPECT_TRUE(engine->submit(std::move(r)).ok());
  }
  const model::ModelConfig& c = model->config();
  rollout::RouteShape shape;
  if (sampling.routes) {
    shape = {static_cast<int32_t>(c.num_moe_layers()), static_cast<int32_t>(c.num_experts_per_tok),
             c.num_experts};
  }
  std::vector<buffer::TrajectoryGroup> groups;
  for (const rollout::GroupResult& result : engine->run_until_idle()) {
    std::vector<rewards::ScoredSample> scored(4);
    for (int i = 0; i < 4; ++i) scored[i].reward = i % 2;
    v1::PromptLease lease;
    lease.set_lease_id(groups.size() + 1);
    groups.push_back(rollout::trajectory_group("w", lease, result, scored, {}, 4, shape));
  }
  return groups;
}

// A learner of `options` (lr 1e-4 over 10 steps unless set) holding `model`'s weights in float32.
inline std::unique_ptr<Learner> learner_with_weights(comm::Communicator& world,
                                                     const model::DecoderModel& model,
                                                     LearnerOptions options) {
  options.lr.lr = 1e-4;
  options.lr.total_steps = 10;
  auto learner = std::move(*Learner::create(options, test_algorithm(algos::AggMode::kTokenMean),
                                            model.config(), &world));
  std::map<std::string, at::Tensor> weights;
  for (const auto& [name, p] : model.named_parameters()) weights[name] = p.to(at::kFloat);
  EXPECT_TRUE(learner->policy()
                  .load([&](const std::string& name) -> absl::StatusOr<at::Tensor> {
                    auto it = weights.find(name);
                    if (it == weights.end()) return absl::NotFoundError(name);
                    return it->second;
                  })
                  .ok());
  return learner;
}

}  // namespace flywheel::trainer::testing
