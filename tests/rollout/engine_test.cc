#include "flywheel/rollout/engine.h"

#include <ATen/ATen.h>

#include "engine_test_util.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/logprobs.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

TEST(GenerationEngineTest, GreedyEqualsFullRecomputeForRaggedPrompts) {
  for (const char* family : {"qwen2", "qwen3", "llama"}) {
    auto model = shared_model(family);
    auto engine = make_engine(model);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      ASSERT_TRUE(engine->submit(greedy("r" + std::to_string(i), kPrompts[i], 10)).ok());
    }
    auto results = by_id(engine->run_until_idle());
    ASSERT_EQ(results.size(), kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      const Sample& s = results["r" + std::to_string(i)].samples.at(0);
      EXPECT_EQ(s.token_ids, greedy_by_recompute(*model, kPrompts[i], 10)) << family << " " << i;
      EXPECT_EQ(s.finish_reason, FinishReason::kLength);
    }
  }
}

// With the model's worker pool (2 threads), a step of many rows spreads its row-wise work
// (greedy argmax, sampling) and kernels over the workers, which run inside the engine's
// InferenceMode: the same tokens and log-probs as one thread, greedy and sampled alike.
TEST(GenerationEngineTest, TwoThreadsGiveOneThreadsTokensForManyRows) {
  std::map<std::string, GroupResult> by_threads[2];
  for (int threads : {1, 2}) {
    EngineOptions options;
    options.max_slots = 40;
    auto engine = make_engine(shared_model("qwen2", 1, threads), options);
    for (int i = 0; i < 20; ++i) {
      GenerationRequest r = greedy("g" + std::to_string(i), kPrompts[i % kPrompts.size()], 6);
      r.prompt_ids.push_back(3 + i);  // distinct prompts
      ASSERT_TRUE(engine->submit(r).ok());
      r.id = "s" + std::to_string(i);
      r.sampling.temperature = 1.0;
      r.sampling.seed = 7 + i;
      ASSERT_TRUE(engine->submit(r).ok());
    }
    by_threads[threads - 1] = by_id(engine->run_until_idle());
  }
  ASSERT_EQ(by_threads[0].size(), 40u);
  ASSERT_EQ(by_threads[1].size(), 40u);
  for (const auto& [id, one] : by_threads[0]) {
    const Sample& a = one.samples.at(0);
    const Sample& b = by_threads[1].at(id).samples.at(0);
    EXPECT_EQ(b.finish_reason, FinishReason::kLength) << id << ": " << b.error;
    EXPECT_EQ(a.token_ids, b.token_ids) << id;
    EXPECT_EQ(a.logprobs, b.logprobs) << id;
  }
}

TEST(GenerationEngineTest, ContinuousBatchingWithMidFlightArrivalsEqualsRunningAlone) {
  auto model = shared_model("qwen3");
  // Alone: each request in its own engine.
  std::vector<std::vector<int64_t>> alone;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto e = make_engine(model);
    ASSERT_TRUE(e->submit(greedy("x", kPrompts[i], 6 + i)).ok());
    alone.push_back(e->run_until_idle().at(0).samples.at(0).token_ids);
  }
  // Together, with 3 slots: requests arrive while others decode, slots are reused.
  EngineOptions options;
  options.max_slots = 3;
  auto engine = make_engine(model, options);
  std::vector<GroupResult> results;
  ASSERT_TRUE(engine->submit(greedy("r0", kPrompts[0], 6)).ok());
  engine->step();
  engine->step();
  ASSERT_TRUE(engine->submit(greedy("r1", kPrompts[1], 7)).ok());
  engine->step();
  for (size_t i = 2; i < kPrompts.size(); ++i) {
    ASSERT_TRUE(engine->submit(greedy("r" + std::to_string(i), kPrompts[i], 6 + i)).ok());
    engine->step();
  }
  auto finished = by_id(engine->run_until_idle());
  EXPECT_EQ(engine->active_sequences(), 0);
  ASSERT_EQ(finished.size(), kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(finished[id].samples.at(0).token_ids, alone[i]) << id;
  }
}

TEST(GenerationEngineTest, NothingIsLostAcrossTakeFinished) {
  auto model = shared_model("llama");
  EngineOptions options;
  options.max_slots = 2;
  auto engine = make_engine(model, options);
  std::map<std::string, GroupResult> all;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(engine->submit(greedy("r" + std::to_string(i), kPrompts[i % 5], 3 + i)).ok());
    engine->step();
    for (auto& r : engine->take_finished()) all[r.request_id] = std::move(r);
  }
  for (auto& r : engine->run_until_idle()) all[r.request_id] = std::move(r);
  ASSERT_EQ(all.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(all["r" + std::to_string(i)].samples.at(0).token_ids,
              greedy_by_recompute(*model, kPrompts[i % 5], 3 + i));
  }
}

TEST(GenerationEngineTest, GroupSamplesShareThePrefillAndAreReproducibleWithASeed) {
  auto model = shared_model("qwen2");
  auto run = [&](uint64_t seed) {
    auto engine = make_engine(model);
    GenerationRequest r;
    r.id = "g";
    r.prompt_ids = kPrompts[0];
    r.n = 4;
    r.sampling.temperature = 1.0;
    r.sampling.max_new_tokens = 12;
    r.sampling.seed = seed;
    EXPECT_TRUE(engine->submit(r).ok());
    return engine->run_until_idle().at(0);
  };
  GroupResult a = run(7), b = run(7), c = run(8);
  ASSERT_EQ(a.samples.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.samples[i].token_ids, b.samples[i].token_ids);
  EXPECT_NE(a.samples[0].token_ids, a.samples[1].token_ids);  // distinct generators per sample
  bool differs = false;
  for (int i = 0; i < 4; ++i) differs = differs || a.samples[i].token_ids != c.samples[i].token_ids;
  EXPECT_TRUE(differs);
}

TEST(GenerationEngineTest, BehaviourLogprobsEqualTheTrainersTokenLogprobs) {
  // The rollout-vs-trainer consistency oracle (float32, atol 1e-4).
  for (double temperature : {1.0, 0.7}) {
    auto model = shared_model("qwen3");
    auto engine = make_engine(model);
    for (size_t i = 0; i < 3; ++i) {
      GenerationRequest r;
      r.id = "r" + std::to_string(i);
      r.prompt_ids = kPrompts[i];
      r.n = 2;
      r.sampling.temperature = temperature;
      r.sampling.top_k = 20;  // truncation must not change the behaviour log-prob
      r.sampling.max_new_tokens = 9;
      r.sampling.seed = 11;
      ASSERT_TRUE(engine->submit(r).ok());
    }
    for (const GroupResult& group : engine->run_until_idle()) {
      for (const Sample& s : group.samples) {
        std::vector<int64_t> seq = group.prompt_ids;
        seq.insert(seq.end(), s.token_ids.begin(), s.token_ids.end());
        const int64_t T = seq.size(), P = group.prompt_ids.size(), G = s.token_ids.size();
        model::ForwardBatch b;
        b.tokens = at::tensor(seq, at::kLong).view({1, T});
        b.positions = at::arange(T, at::kLong).view({1, T});
        at::NoGradGuard no_grad;
        at::Tensor hidden = model->forward(b);
        model::TokenLogprobOptions o;
        o.temperature = temperature;
        at::Tensor expected =
            model::token_logprobs(hidden.narrow(1, P - 1, G), model->lm_head_weight(),
                                  b.tokens.narrow(1, P, G), o)
                .logprobs[0];
        at::Tensor got = at::tensor(s.logprobs);
        EXPECT_TRUE(at::allclose(got, expected, 0, 1e-4))
            << "T=" << temperature << " max diff " << (got - expected).abs().max().item<float>();
      }
    }
  }
}

TEST(GenerationEngineTest, StopTokensAndStopConditionsEndSequences) {
  auto model = shared_model("qwen2");
  std::vector<int64_t> expected = greedy_by_recompute(*model, kPrompts[0], 10);
  auto engine = make_engine(model);
  GenerationRequest r = greedy("s", kPrompts[0], 10);
  r.sampling.stop_token_ids = {expected[3]};
  ASSERT_TRUE(engine->submit(r).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  // Stops at the first occurrence of the stop token, which is kept.
  auto first = std::find(expected.begin(), expected.end(), expected[3]);
  EXPECT_EQ(s.token_ids, std::vector<int64_t>(expected.begin(), first + 1));
  EXPECT_EQ(s.finish_reason, FinishReason::kStop);
  // The context length stops a sequence too.
  EngineOptions options;
  options.max_seq_len = 8;
  auto short_engine = make_engine(model, options);
  ASSERT_TRUE(short_engine->submit(greedy("l", kPrompts[0], 100)).ok());
  Sample l = short_engine->run_until_idle().at(0).samples.at(0);
  EXPECT_EQ(l.token_ids.size(), 2u);  // 6 prompt + 2 generated = max_seq_len
  EXPECT_EQ(l.finish_reason, FinishReason::kLength);
}

TEST(GenerationEngineTest, StopStringsEndTheSequenceOnceCompleted) {
  auto model = shared_model("qwen3");
  auto tokenizer = model::load_tokenizer("", "char");  // 100 ids; the model emits < 97
  ASSERT_TRUE(tokenizer.ok());
  std::vector<int64_t> expected = greedy_by_recompute(*model, kPrompts[3], 12);
  // The stop string is the text of generated tokens 3 and 4.
  std::string stop = *(*tokenizer)->decode({expected[3], expected[4]});
  std::string all = *(*tokenizer)->decode(expected);
  size_t first_end = all.find(stop) + stop.size();
  EngineContext context;
  context.tokenizer = tokenizer->get();
  auto engine = make_engine(model, {}, context);
  GenerationRequest r = greedy("s", kPrompts[3], 12);
  r.sampling.stop_strings = {stop};
  ASSERT_TRUE(engine->submit(r).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  EXPECT_EQ(s.finish_reason, FinishReason::kStop);
  std::string text = *(*tokenizer)->decode(s.token_ids);
  EXPECT_EQ(text.size(), first_end) << text;  // ends with the first completed stop string
  EXPECT_EQ(text.substr(text.size() - stop.size()), stop);
}

TEST(GenerationEngineTest, WeightUpdateMidGenerationStampsVersionsAndUsesTheNewWeights) {
  auto model = shared_model("llama", 1);
  auto new_weights_model = tiny_model("llama", at::kFloat, 99);
  std::vector<std::pair<std::string, at::Tensor>> new_weights;
  for (const auto& [name, p] : new_weights_model->named_parameters()) {
    new_weights.emplace_back(name, p.clone());
  }
  EngineOptions options;
  options.recompute_kv_on_update = true;
  auto engine = make_engine(model, options);
  ASSERT_TRUE(engine->submit(greedy("w", kPrompts[0], 12)).ok());
  engine->step();  // prefill + first token + one decode
  engine->step();
  engine->step();
  ASSERT_TRUE(engine->update_weights(new_weights, /*version=*/5).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  ASSERT_EQ(s.token_ids.size(), 12u);
  const int64_t before = std::count(s.versions.begin(), s.versions.end(), 0);
  EXPECT_EQ(before, 4);  // tokens of the first three steps (prefill gives one, decodes one each)
  for (size_t i = before; i < s.versions.size(); ++i) EXPECT_EQ(s.versions[i], 5);
  EXPECT_EQ(engine->version(), 5);
  // Tokens after the swap are the new weights' greedy continuation of the same prefix.
  std::vector<int64_t> prefix = kPrompts[0];
  prefix.insert(prefix.end(), s.token_ids.begin(), s.token_ids.begin() + before);
  std::vector<int64_t> after(s.token_ids.begin() + before, s.token_ids.end());
  EXPECT_EQ(after, greedy_by_recompute(*new_weights_model, prefix, after.size()));
}

TEST(GenerationEngineTest, DrainModeAppliesWeightsOnlyWhenNothingIsActive) {
  auto model = shared_model("qwen2");
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& [name, p] : model->named_parameters()) weights.emplace_back(name, p.clone());
  EngineOptions options;
  options.drain_before_update = true;
  auto engine = make_engine(model, options);
  ASSERT_TRUE(engine->submit(greedy("a", kPrompts[0], 5)).ok());
  engine->step();
  ASSERT_TRUE(engine->update_weights(weights, 1).ok());
  ASSERT_TRUE(engine->submit(greedy("b", kPrompts[1], 5)).ok());
  auto results = by_id(engine->run_until_idle());
  for (int64_t v : results["a"].samples[0].versions) EXPECT_EQ(v, 0);  // drained under v0
  for (int64_t v : results["b"].samples[0].versions) EXPECT_EQ(v, 1);  // admitted after
}

// A restarted controller publishes older versions than the engine saw: after reset_version()
// they apply, and tokens carry them.
TEST(GenerationEngineTest, ResetVersionAcceptsOlderWeightsOnlyWhenIdle) {
  auto model = shared_model("qwen2");
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& [name, p] : model->named_parameters()) weights.emplace_back(name, p.clone());
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->update_weights(weights, 5).ok());
  engine->step();
  ASSERT_EQ(engine->version(), 5);
  EXPECT_FALSE(engine->update_weights(weights, 3).ok());
  ASSERT_TRUE(engine->submit(greedy("busy", kPrompts[0], 4)).ok());
  EXPECT_EQ(engine->reset_version(-1).code(), absl::StatusCode::kFailedPrecondition);
  engine->abort_all();
  (void)engine->take_finished();
  ASSERT_TRUE(engine->reset_version(-1).ok());
  ASSERT_TRUE(engine->update_weights(weights, 3).ok());
  ASSERT_TRUE(engine->submit(greedy("after", kPrompts[1], 4)).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  for (int64_t v : s.versions) EXPECT_EQ(v, 3);
  EXPECT_EQ(engine->version(), 3);
}

TEST(GenerationEngineTest, BadRequestsAreRejectedAndTheEngineKeepsServing) {
  auto model = shared_model("qwen2");
  EngineOptions options;
  options.max_seq_len = 16;
  auto engine = make_engine(model, options);
  ASSERT_TRUE(engine->submit(greedy("good", kPrompts[2], 4)).ok());
  auto error = [&](GenerationRequest r) {
    return std::string(engine->submit(std::move(r)).message());
  };
  EXPECT_THAT(error(greedy("long", std::vector<int64_t>(16, 1))),
              HasSubstr("leaves no room in the context of 16 tokens"));
  EXPECT_THAT(error(greedy("empty", {})), HasSubstr("empty prompt"));
  EXPECT_THAT(error(greedy("oov", {1, 97})),
              HasSubstr("has id 97, outside the vocabulary [0, 97)"));
  GenerationRequest zero = greedy("zero", {1});
  zero.n = 0;
  EXPECT_THAT(error(zero), HasSubstr("n must be in [1, 8]"));
  GenerationRequest cold = greedy("cold", {1});
  cold.sampling.temperature = -0.5;
  EXPECT_THAT(error(cold), HasSubstr("temperature must be >= 0"));
  GenerationRequest stop = greedy("stop", {1});
  stop.sampling.stop_strings = {"x"};
  EXPECT_THAT(error(stop), HasSubstr("stop strings need a tokenizer"));
  GenerationRequest proc = greedy("proc", {1});
  proc.sampling.logits_processors = {{"nope", {}}};
  EXPECT_THAT(error(proc), HasSubstr("logits processors need a registry"));
  EXPECT_EQ(engine->submit(greedy("good", {1})).code(), absl::StatusCode::kAlreadyExists);
  auto results = engine->run_until_idle();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].samples[0].token_ids, greedy_by_recompute(*model, kPrompts[2], 4));
  EXPECT_EQ(engine->update_weights({{"nope", at::zeros({1})}}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(engine->update_weights({{"model.norm.weight", at::zeros({3})}}, 1).message()),
      HasSubstr("has shape [3], the model needs [32]"));
}

TEST(GenerationEngineTest, AbortFinishesActiveAndQueuedRequests) {
  auto model = shared_model("qwen3");
  EngineOptions options;
  options.max_slots = 2;
  auto engine = make_engine(model, options);
  GenerationRequest a = greedy("a", kPrompts[0], 50);
  a.n = 2;
  ASSERT_TRUE(engine->submit(a).ok());
  ASSERT_TRUE(engine->submit(greedy("b", kPrompts[1], 50)).ok());
  engine->step();
  engine->step();
  ASSERT_TRUE(engine->abort("a").ok());
  ASSERT_TRUE(engine->abort("b").ok());
  EXPECT_EQ(engine->abort("zzz").code(), absl::StatusCode::kNotFound);
  auto results = by_id(engine->take_finished());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results["a"].samples.size(), 2u);
  EXPECT_EQ(results["a"].samples[0].finish_reason, FinishReason::kAbort);
  // Tokens so far are kept: step 1 samples from the prefill and decodes once, step 2 decodes.
  EXPECT_EQ(results["a"].samples[0].token_ids.size(), 3u);
  EXPECT_TRUE(results["b"].samples.empty());  // aborted while queued: no samples at all
  EXPECT_TRUE(engine->idle());
  // The freed slots serve new work.
  ASSERT_TRUE(engine->submit(greedy("c", kPrompts[2], 3)).ok());
  EXPECT_EQ(engine->run_until_idle().size(), 1u);
}

TEST(GenerationEngineTest, LogitsProcessorsComeFromTheRegistry) {
  auto model = shared_model("qwen2");
  core::PluginRegistry registry;
  ASSERT_TRUE(register_rollout_builtins(registry).ok());
  EngineContext context;
  context.registry = &registry;
  auto engine = make_engine(model, {}, context);
  GenerationRequest r = greedy("p", {5, 5, 5}, 20);
  r.sampling.logits_processors = {{"repetition_penalty", {{"penalty", "1000"}}}};
  ASSERT_TRUE(engine->submit(r).ok());
  GenerationRequest bad = greedy("q", {5});
  bad.sampling.logits_processors = {{"repetition_penalty", {{"penalty", "-1"}}}};
  EXPECT_THAT(std::string(engine->submit(bad).message()),
              HasSubstr("penalty must be a number > 0"));
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  // A huge penalty forbids repeating any token of the prompt or the output.
  std::set<int64_t> seen = {5};
  for (int64_t t : s.token_ids) EXPECT_TRUE(seen.insert(t).second) << "repeated " << t;
}

}  // namespace
}  // namespace flywheel::rollout
