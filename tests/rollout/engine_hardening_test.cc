// Regression tests of the generation engine (issue 10): bucketed and aliased weight updates,
// failures inside a step, NaN left in reused KV-cache slots, the padded prefill budget, and a
// randomized test of all of it together.
#include <ATen/ATen.h>

#include <limits>
#include <random>
#include <set>
#include <stdexcept>

#include "engine_test_util.h"
#include "flywheel/core/plugin_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;
using Weights = std::vector<std::pair<std::string, at::Tensor>>;

Weights weights_of(const model::DecoderModel& m) {
  Weights w;
  for (const auto& [name, p] : m.named_parameters()) w.emplace_back(name, p);
  return w;
}

// Test logits processors, selected by name: "throw_at" throws once the sample has `len`
// tokens (prompt included); "nan_at" fills the row with NaN there; "mask_all" masks everything.
class Injector : public LogitsProcessor {
 public:
  enum class Kind { kThrow, kNan, kMaskAll };
  Injector(Kind kind, size_t at) : kind_(kind), at_(at) {}
  void apply(at::Tensor& logits, const std::vector<int64_t>& tokens) const override {
    if (kind_ == Kind::kMaskAll) {
      logits.fill_(-std::numeric_limits<float>::infinity());
    } else if (tokens.size() == at_ && kind_ == Kind::kThrow) {
      throw std::runtime_error("injected failure");
    } else if (tokens.size() == at_) {
      logits.fill_(std::numeric_limits<float>::quiet_NaN());
    }
  }

 private:
  Kind kind_;
  size_t at_;
};

void register_injectors(core::PluginRegistry& registry) {
  auto& r = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
  for (auto [name, kind] :
       {std::pair{"throw_at", Injector::Kind::kThrow}, std::pair{"nan_at", Injector::Kind::kNan},
        std::pair{"mask_all", Injector::Kind::kMaskAll}}) {
    ASSERT_TRUE(r.add(name,
                      [kind = kind](const LogitsProcessorParams& p)
                          -> absl::StatusOr<std::unique_ptr<LogitsProcessor>> {
                        const size_t at = p.count("len") ? std::stoul(p.at("len")) : 0;
                        return std::unique_ptr<LogitsProcessor>(new Injector(kind, at));
                      })
                    .ok());
  }
}

// Two update_weights() calls before a step (a trainer publishing in buckets) are merged: the
// engine then runs the complete new weights, not the last bucket over the old ones.
TEST(EngineWeightsTest, BucketsOfOneVersionAreMergedAndAppliedTogether) {
  auto model = shared_model("llama", 1);
  auto next = tiny_model("llama", at::kFloat, 99);
  Weights all = weights_of(*next);
  Weights first(all.begin(), all.begin() + all.size() / 2),
      second(all.begin() + all.size() / 2, all.end());
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->update_weights(first, 1).ok());
  ASSERT_TRUE(engine->update_weights(second, 1).ok());
  ASSERT_TRUE(engine->submit(greedy("a", kPrompts[0], 8)).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  EXPECT_EQ(s.token_ids, greedy_by_recompute(*next, kPrompts[0], 8));
  for (int64_t v : s.versions) EXPECT_EQ(v, 1);
}

// Buckets staged across steps are applied only once the version is committed; a newer version
// keeps the staged tensors it does not name and is applied together with them.
TEST(EngineWeightsTest, StagedBucketsWaitForTheirCommitAndNewerVersionsMerge) {
  auto model = shared_model("qwen2", 1);
  auto old_model = tiny_model("qwen2", at::kFloat, 1);
  auto next = tiny_model("qwen2", at::kFloat, 7);
  Weights all = weights_of(*next);
  const size_t half = all.size() / 2;
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->submit(greedy("a", kPrompts[0], 6)).ok());
  ASSERT_TRUE(engine->stage_weights(Weights(all.begin(), all.begin() + half), 1).ok());
  engine->step();
  engine->step();
  // Version 2 names the rest; version 1's half stays staged and goes in with it.
  ASSERT_TRUE(engine->stage_weights(Weights(all.begin() + half, all.end()), 2).ok());
  EXPECT_EQ(engine->commit_weights(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->stage_weights(Weights(all.begin(), all.begin() + 1), 1).code(),
            absl::StatusCode::kInvalidArgument);  // older than the staged version
  engine->step();
  EXPECT_EQ(engine->version(), 0);  // nothing committed yet
  ASSERT_TRUE(engine->commit_weights(2).ok());
  Sample s = engine->run_until_idle().at(0).samples.at(0);
  EXPECT_EQ(engine->version(), 2);
  ASSERT_EQ(s.versions.size(), 6u);
  const int64_t before = std::count(s.versions.begin(), s.versions.end(), 0);
  EXPECT_EQ(before, 4);
  std::vector<int64_t> head(s.token_ids.begin(), s.token_ids.begin() + before);
  EXPECT_EQ(head, greedy_by_recompute(*old_model, kPrompts[0], before));
  ASSERT_TRUE(engine->submit(greedy("b", kPrompts[1], 5)).ok());
  EXPECT_EQ(engine->run_until_idle().at(0).samples.at(0).token_ids,
            greedy_by_recompute(*next, kPrompts[1], 5));
  EXPECT_EQ(engine->stage_weights(all, 2).code(), absl::StatusCode::kInvalidArgument);
}

// Staging copies: an optimizer step that changes the caller's tensors in place right after
// update_weights() is not applied under the staged version.
TEST(EngineWeightsTest, StagedWeightsDoNotAliasTheCallersTensors) {
  auto model = shared_model("qwen3", 1);
  auto next = tiny_model("qwen3", at::kFloat, 5);
  Weights mine;
  for (const auto& [name, p] : next->named_parameters()) mine.emplace_back(name, p.clone());
  auto engine = make_engine(model);
  ASSERT_TRUE(engine->update_weights(mine, 1).ok());
  for (auto& [name, t] : mine) t.mul_(-3.0);  // the caller's next step, in place
  ASSERT_TRUE(engine->submit(greedy("a", kPrompts[3], 6)).ok());
  EXPECT_EQ(engine->run_until_idle().at(0).samples.at(0).token_ids,
            greedy_by_recompute(*next, kPrompts[3], 6));
}

// Failures inside a step finish the affected sequences with kError; the others and later
// requests are served. None escapes step().
TEST(EngineFailuresTest, SamplingFailuresEndOnlyTheirSequence) {
  auto model = shared_model("qwen2");
  core::PluginRegistry registry;
  register_injectors(registry);
  EngineContext context;
  context.registry = &registry;
  auto engine = make_engine(model, {}, context);
  GenerationRequest thrower = greedy("throw", kPrompts[0], 8);
  thrower.sampling.logits_processors = {{"throw_at", {{"len", "9"}}}};
  GenerationRequest nan = greedy("nan", kPrompts[0], 8);
  nan.sampling.temperature = 0.8;
  nan.sampling.logits_processors = {{"nan_at", {{"len", "7"}}}};
  GenerationRequest masked = greedy("masked", kPrompts[1], 8);
  masked.sampling.logits_processors = {{"mask_all", {}}};
  for (auto* r : {&thrower, &nan, &masked}) ASSERT_TRUE(engine->submit(*r).ok());
  ASSERT_TRUE(engine->submit(greedy("fine", kPrompts[2], 8)).ok());
  auto results = by_id(engine->run_until_idle());
  ASSERT_EQ(results.size(), 4u);
  const Sample& t = results["throw"].samples.at(0);
  EXPECT_EQ(t.finish_reason, FinishReason::kError);
  EXPECT_THAT(t.error, HasSubstr("injected failure"));
  EXPECT_EQ(t.token_ids.size(), 3u);  // the prompt has 6 tokens; the 4th sample fails
  EXPECT_EQ(results["nan"].samples.at(0).finish_reason, FinishReason::kError);
  EXPECT_EQ(results["nan"].samples.at(0).token_ids.size(), 1u);
  EXPECT_EQ(results["masked"].samples.at(0).finish_reason, FinishReason::kError);
  EXPECT_THAT(results["masked"].samples.at(0).error, HasSubstr("no token"));
  EXPECT_EQ(results["fine"].samples.at(0).token_ids, greedy_by_recompute(*model, kPrompts[2], 8));
  EXPECT_EQ(engine->active_sequences(), 0);
  EXPECT_TRUE(engine->idle());
}

TEST(EngineFailuresTest, NanWeightsEndSequencesWithErrorsAndTinyTemperaturesAreRejected) {
  auto model = shared_model("llama", 3);
  auto engine = make_engine(model);
  GenerationRequest tiny = greedy("tiny", kPrompts[0], 4);
  tiny.sampling.temperature = 1e-40;  // logits / 1e-40 overflows float32
  EXPECT_THAT(std::string(engine->submit(tiny).message()), HasSubstr("temperature must be 0"));
  Weights nan;
  for (const auto& [name, p] : model->named_parameters()) {
    nan.emplace_back(name, at::full_like(p, std::numeric_limits<float>::quiet_NaN()));
  }
  ASSERT_TRUE(engine->update_weights(nan, 1).ok());
  GenerationRequest sampled = greedy("sampled", kPrompts[0], 4);
  sampled.sampling.temperature = 1.0;
  ASSERT_TRUE(engine->submit(sampled).ok());
  ASSERT_TRUE(engine->submit(greedy("greedy", kPrompts[1], 4)).ok());
  auto results = by_id(engine->run_until_idle());
  for (const char* id : {"sampled", "greedy"}) {
    EXPECT_EQ(results[id].samples.at(0).finish_reason, FinishReason::kError) << id;
    EXPECT_THAT(results[id].samples.at(0).error, HasSubstr("non-finite logits")) << id;
  }
}

// After one bad weight version, sequences in reused slots compute exactly what they would in a
// fresh engine: stale NaN keys/values of the earlier sequence contribute nothing.
TEST(EngineFailuresTest, NanLeftInAReusedSlotDoesNotPoisonTheNextSequence) {
  auto good = tiny_model("qwen2", at::kFloat, 1);
  auto model = shared_model("qwen2", 1);
  EngineOptions options;
  options.max_slots = 2;
  auto engine = make_engine(model, options);
  Weights nan;
  for (const auto& [name, p] : model->named_parameters()) {
    nan.emplace_back(name, at::full_like(p, std::numeric_limits<float>::quiet_NaN()));
  }
  ASSERT_TRUE(engine->update_weights(nan, 1).ok());
  std::vector<int64_t> long_prompt(30);
  for (int i = 0; i < 30; ++i) long_prompt[i] = (i * 7) % 97;
  ASSERT_TRUE(engine->submit(greedy("poison0", long_prompt, 4)).ok());
  ASSERT_TRUE(engine->submit(greedy("poison1", long_prompt, 4)).ok());
  engine->run_until_idle();  // both slots now hold NaN at positions [0, 30)
  ASSERT_TRUE(engine->update_weights(weights_of(*good), 2).ok());
  // A short prompt in one slot while a long one runs in the other: the short row reads up to
  // the long row's length, over the stale positions of its slot.
  ASSERT_TRUE(engine->submit(greedy("short", kPrompts[1], 6)).ok());
  ASSERT_TRUE(engine->submit(greedy("long", long_prompt, 6)).ok());
  auto results = by_id(engine->run_until_idle());
  const Sample& s = results["short"].samples.at(0);
  ASSERT_EQ(s.finish_reason, FinishReason::kLength) << s.error;
  EXPECT_EQ(s.token_ids, greedy_by_recompute(*good, kPrompts[1], 6));
  for (float lp : s.logprobs) EXPECT_TRUE(std::isfinite(lp));
  EXPECT_EQ(results["long"].samples.at(0).token_ids, greedy_by_recompute(*good, long_prompt, 6));
}

// max_prefill_tokens bounds what a prefill forward computes: groups x the longest prompt.
TEST(EnginePrefillTest, TheBudgetCountsPaddedTokens) {
  auto model = shared_model("qwen3");
  EngineOptions options;
  options.max_prefill_tokens = 64;
  auto engine = make_engine(model, options);
  std::vector<int64_t> long_prompt(60, 3);
  ASSERT_TRUE(engine->submit(greedy("long", long_prompt, 1)).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(engine->submit(greedy("s" + std::to_string(i), {4, 5, 6, 7}, 1)).ok());
  }
  engine->step();
  EXPECT_LE(engine->stats().prefill_tokens, 64);  // was 5 x 60 = 300
  engine->step();
  EXPECT_EQ(engine->stats().prefill_tokens, 60 + 4 * 4);
  EXPECT_EQ(engine->run_until_idle().size(), 5u);
}

// Random requests (lengths, n, sampling, aborts, injected failures) while new versions arrive
// in random buckets between steps: every request finishes exactly once, no slot leaks, and every
// token's log-prob is the one the complete weights of its version give for its prefix.
TEST(EngineRandomizedTest, EveryRequestFinishesAndEveryTokenComesFromCompleteWeights) {
  for (bool drain : {false, true}) {
    SCOPED_TRACE(drain ? "drain_before_update" : "in-flight updates, KV recomputed");
    std::mt19937_64 rng(drain ? 11 : 12);
    auto uniform = [&](int64_t lo, int64_t hi) {  // [lo, hi]
      return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    std::map<int64_t, std::unique_ptr<model::DecoderModel>> versions;
    versions[0] = tiny_model("qwen2", at::kFloat, 1);
    auto model = shared_model("qwen2", 1);
    core::PluginRegistry registry;
    register_injectors(registry);
    EngineContext context;
    context.registry = &registry;
    EngineOptions options;
    options.max_slots = 6;
    options.max_seq_len = 40;
    options.max_prefill_tokens = uniform(8, 64);
    options.drain_before_update = drain;
    options.recompute_kv_on_update = !drain;
    auto engine = make_engine(model, options, context);

    std::map<std::string, GenerationRequest> submitted;
    std::map<std::string, GroupResult> finished;
    std::set<std::string> live;
    int64_t staging = 0;  // version being staged (0 = none)
    std::vector<Weights> buckets;
    auto collect = [&] {
      for (GroupResult& r : engine->take_finished()) {
        EXPECT_EQ(finished.count(r.request_id), 0u) << "finished twice: " << r.request_id;
        live.erase(r.request_id);
        finished[r.request_id] = std::move(r);
      }
    };
    for (int step = 0; step < 300; ++step) {
      if (submitted.size() < 40 && uniform(0, 9) < 3) {
        GenerationRequest r;
        r.id = "r" + std::to_string(submitted.size());
        for (int64_t i = uniform(1, 20); i > 0; --i) r.prompt_ids.push_back(uniform(0, 96));
        r.n = uniform(1, 3);
        r.sampling.max_new_tokens = uniform(1, 12);
        const double temperatures[] = {0, 0.7, 1.0, 1.3};
        r.sampling.temperature = temperatures[uniform(0, 3)];
        if (uniform(0, 3) == 0) r.sampling.top_k = uniform(1, 20);
        if (uniform(0, 3) == 0) r.sampling.top_p = 0.9;
        r.sampling.seed = rng();
        r.sampling.stop_token_ids = {static_cast<int64_t>(uniform(0, 96))};
        const int64_t inject = uniform(0, 9);
        const std::string len = std::to_string(r.prompt_ids.size() + uniform(0, 6));
        if (inject == 0) r.sampling.logits_processors = {{"throw_at", {{"len", len}}}};
        if (inject == 1) r.sampling.logits_processors = {{"nan_at", {{"len", len}}}};
        ASSERT_TRUE(engine->submit(r).ok());
        live.insert(r.id);
        submitted[r.id] = r;
      }
      if (!live.empty() && uniform(0, 19) == 0) {
        auto it = live.begin();
        std::advance(it, uniform(0, live.size() - 1));
        ASSERT_TRUE(engine->abort(*it).ok());
      }
      if (uniform(0, 5) == 0) {
        if (staging == 0) {  // a new version, split into 1-4 random buckets
          staging = static_cast<int64_t>(versions.size());
          versions[staging] = tiny_model("qwen2", at::kFloat, 100 + staging);
          Weights all = weights_of(*versions[staging]);
          std::shuffle(all.begin(), all.end(), rng);
          buckets.assign(uniform(1, 4), {});
          for (auto& w : all) buckets[uniform(0, buckets.size() - 1)].push_back(std::move(w));
        }
        ASSERT_TRUE(engine->stage_weights(buckets.back(), staging).ok());
        buckets.pop_back();
        if (buckets.empty()) {
          ASSERT_TRUE(engine->commit_weights(staging).ok());
          staging = 0;
        }
      }
      engine->step();
      collect();
    }
    while (staging != 0) {  // complete the version being staged
      ASSERT_TRUE(engine->stage_weights(buckets.back(), staging).ok());
      buckets.pop_back();
      if (buckets.empty()) {
        ASSERT_TRUE(engine->commit_weights(staging).ok());
        staging = 0;
      }
    }
    for (int guard = 0; !engine->idle() && guard < 10000; ++guard) {
      engine->step();
      collect();
    }
    ASSERT_TRUE(engine->idle());
    EXPECT_EQ(engine->active_sequences(), 0);
    ASSERT_EQ(finished.size(), submitted.size());
    int64_t checked = 0, errors = 0, aborts = 0, mixed = 0;
    for (const auto& [id, result] : finished) {
      const GenerationRequest& r = submitted[id];
      ASSERT_TRUE(result.samples.empty() || static_cast<int64_t>(result.samples.size()) == r.n);
      const double t = r.sampling.temperature > 0 ? r.sampling.temperature : 1.0;
      for (const Sample& s : result.samples) {
        const size_t n = s.token_ids.size();
        ASSERT_EQ(s.logprobs.size(), n);
        ASSERT_EQ(s.versions.size(), n);
        if (s.finish_reason == FinishReason::kError) {
          EXPECT_FALSE(r.sampling.logits_processors.empty()) << id << ": " << s.error;
          ++errors;
        }
        aborts += s.finish_reason == FinishReason::kAbort;
        mixed += n > 0 && s.versions.front() != s.versions.back();
        // Recompute every token's log-prob under its version's complete weights.
        std::vector<int64_t> tokens = r.prompt_ids;
        tokens.insert(tokens.end(), s.token_ids.begin(), s.token_ids.end());
        std::map<int64_t, at::Tensor> logp;  // version -> [T, V] log-probs
        for (size_t k = 0; k < n; ++k) {
          if (k > 0) EXPECT_GE(s.versions[k], s.versions[k - 1]);
          const int64_t v = s.versions[k];
          ASSERT_TRUE(versions.count(v)) << "unknown version " << v;
          if (!logp.count(v)) {
            at::NoGradGuard no_grad;
            model::ForwardBatch b;
            const int64_t T = tokens.size();
            b.tokens = at::tensor(tokens, at::kLong).view({1, T});
            b.positions = at::arange(T, at::kLong).view({1, T});
            const auto& m = *versions[v];
            logp[v] = at::log_softmax(m.logits(m.forward(b))[0] / t, -1);
          }
          const int64_t position = r.prompt_ids.size() + k - 1;
          const float want = logp[v][position][s.token_ids[k]].item<float>();
          EXPECT_NEAR(s.logprobs[k], want, 1e-4) << id << " token " << k << " version " << v;
          ++checked;
        }
      }
    }
    std::cerr << "checked " << checked << " tokens; " << errors << " errors, " << aborts
              << " aborts, " << mixed << " samples across versions, final version "
              << engine->version() << "\n";
    EXPECT_GT(checked, 200);
    EXPECT_GT(errors, 0);
    EXPECT_GT(aborts, 0);
    if (!drain) EXPECT_GT(mixed, 0);  // updates landed mid-sequence
    EXPECT_GE(engine->version(), 2);
    // No slot leaked: a request that needs every slot runs.
    GenerationRequest all = greedy("all-slots", {1, 2, 3}, 2);
    all.n = options.max_slots;
    ASSERT_TRUE(engine->submit(all).ok());
    EXPECT_EQ(engine->run_until_idle().at(0).samples.size(), 6u);
  }
}

}  // namespace
}  // namespace flywheel::rollout
