// Multi-turn samples: a turn that ends waits in its slot, the environment's tokens are appended
// and computed once, and the stream is exactly the turns and observations in order.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

// Runs multi-turn `request` to the end: after each turn, sample s gets observation(s, turn)
// until it has had `turns` turns, then ends. Returns the finished group and each sample's turns.
struct Episodes {
  GroupResult result;
  std::map<int64_t, std::vector<TurnEnd>> turns;  // by sample
};

Episodes run_episodes(GenerationEngine& engine, GenerationRequest request, int64_t turns,
                      const std::function<std::vector<int64_t>(int64_t, int64_t)>& observation) {
  request.multi_turn = true;
  EXPECT_TRUE(engine.submit(request).ok());
  Episodes out;
  for (int guard = 0; guard < 10000 && !engine.idle(); ++guard) {
    engine.step();
    for (TurnEnd& end : engine.take_turn_ends()) {
      std::vector<TurnEnd>& mine = out.turns[end.sample];
      mine.push_back(end);
      const int64_t t = static_cast<int64_t>(mine.size());
      if (t < turns) {
        EXPECT_TRUE(
            engine.continue_sample(end.request_id, end.sample, observation(end.sample, t)).ok());
      } else {
        EXPECT_TRUE(engine.end_sample(end.request_id, end.sample, FinishReason::kStop).ok());
      }
    }
  }
  std::vector<GroupResult> finished = engine.take_finished();
  EXPECT_EQ(finished.size(), 1u);
  if (!finished.empty()) out.result = std::move(finished[0]);
  return out;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(EngineTurnsTest, TheStreamIsTheTurnsAndObservationsAndEveryTokenIsComputedOnce) {
  auto model = shared_model("qwen2");
  auto engine = make_engine(model);
  GenerationRequest request = greedy("episode", kPrompts[0], /*max_new=*/40);
  request.turn_max_new_tokens = 3;
  auto observation = [](int64_t, int64_t turn) { return std::vector<int64_t>{5, 6, 7, turn}; };
  Episodes e = run_episodes(*engine, request, /*turns=*/3, observation);
  ASSERT_EQ(e.result.samples.size(), 1u);
  const Sample& sample = e.result.samples[0];
  EXPECT_EQ(sample.finish_reason, FinishReason::kStop);
  const std::vector<TurnEnd>& turns = e.turns[0];
  ASSERT_EQ(turns.size(), 3u);

  // The stream is turn 0, observation 1, turn 1, observation 2, turn 2, nothing re-tokenized.
  std::vector<int64_t> want;
  std::vector<uint8_t> from_model;
  for (size_t t = 0; t < turns.size(); ++t) {
    EXPECT_EQ(turns[t].reason, FinishReason::kLength);  // turn_max_new_tokens
    EXPECT_EQ(turns[t].token_ids.size(), 3u);
    if (t > 0) {
      const std::vector<int64_t> obs = observation(0, static_cast<int64_t>(t));
      want = concat(want, obs);
      from_model.insert(from_model.end(), obs.size(), 0);
    }
    // Each turn is what greedy decoding of the whole history gives, recomputed without a cache:
    // the KV cache kept across turns holds exactly that history.
    EXPECT_EQ(turns[t].token_ids, greedy_by_recompute(*model, concat(kPrompts[0], want), 3)) << t;
    want = concat(want, turns[t].token_ids);
    from_model.insert(from_model.end(), turns[t].token_ids.size(), 1);
  }
  EXPECT_EQ(sample.token_ids, want);
  EXPECT_EQ(sample.from_model, from_model);
  ASSERT_EQ(sample.logprobs.size(), want.size());
  ASSERT_EQ(sample.versions.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (from_model[i] == 0) {
      EXPECT_EQ(sample.logprobs[i], 0) << i;
      EXPECT_EQ(sample.versions[i], -1) << i;
    } else {
      EXPECT_LT(sample.logprobs[i], 0) << i;
      EXPECT_EQ(sample.versions[i], 0) << i;
    }
  }
  // The prompt once, then every token of the stream but the last once: no history recomputed.
  EXPECT_EQ(engine->stats().computed_tokens,
            static_cast<int64_t>(kPrompts[0].size() + want.size() - 1));
}

TEST(EngineTurnsTest, LogprobsOfModelTokensEqualAFullRecompute) {
  auto model = shared_model("qwen3", /*seed=*/3);
  auto engine = make_engine(model);
  GenerationRequest request = greedy("sampled", kPrompts[3], /*max_new=*/40);
  request.sampling.temperature = 1.0;
  request.sampling.seed = 11;
  request.n = 3;
  request.turn_max_new_tokens = 4;
  // Each sample hears something else, so the three streams differ.
  auto observation = [](int64_t s, int64_t turn) { return std::vector<int64_t>{3 + s, 9, turn}; };
  Episodes e = run_episodes(*engine, request, /*turns=*/3, observation);
  ASSERT_EQ(e.result.samples.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    const Sample& sample = e.result.samples[s];
    const std::vector<int64_t> stream = concat(kPrompts[3], sample.token_ids);
    at::NoGradGuard no_grad;
    model::ForwardBatch b;
    const int64_t T = stream.size();
    b.tokens = at::tensor(stream, at::kLong).view({1, T});
    b.positions = at::arange(T, at::kLong).view({1, T});
    const at::Tensor logp = at::log_softmax(model->logits(model->forward(b))[0], -1);
    const int64_t P = kPrompts[3].size();
    int64_t checked = 0;
    for (size_t i = 0; i < sample.token_ids.size(); ++i) {
      if (!sample.from_model[i]) continue;
      const float want = logp[P + static_cast<int64_t>(i) - 1][sample.token_ids[i]].item<float>();
      EXPECT_NEAR(sample.logprobs[i], want, 1e-4) << "sample " << s << " token " << i;
      ++checked;
    }
    EXPECT_EQ(checked, 12) << s;  // three turns of four tokens
  }
}

TEST(EngineTurnsTest, AStopTokenEndsATurnAndAnEmptyObservationContinuesIt) {
  auto model = shared_model("llama");
  const std::vector<int64_t> greedy_ids = greedy_by_recompute(*model, kPrompts[2], 6);
  auto engine = make_engine(model);
  GenerationRequest request = greedy("stops", kPrompts[2], /*max_new=*/6);
  request.sampling.stop_token_ids = {greedy_ids[1]};
  request.multi_turn = true;
  ASSERT_TRUE(engine->submit(request).ok());
  std::vector<TurnEnd> ends;
  while (ends.empty() && !engine->idle()) {
    engine->step();
    ends = engine->take_turn_ends();
  }
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].reason, FinishReason::kStop);
  const size_t first =
      std::find(greedy_ids.begin(), greedy_ids.end(), greedy_ids[1]) - greedy_ids.begin();
  EXPECT_EQ(ends[0].token_ids,
            std::vector<int64_t>(greedy_ids.begin(), greedy_ids.begin() + first + 1));
  // Waiting: nothing is computed for it until it is continued.
  const int64_t computed = engine->stats().computed_tokens;
  engine->step();
  EXPECT_EQ(engine->stats().computed_tokens, computed);
  EXPECT_TRUE(engine->take_turn_ends().empty());
  // Nothing to add: the model just goes on.
  ASSERT_TRUE(engine->continue_sample("stops", 0, {}).ok());
  std::vector<GroupResult> done;
  while (!engine->idle()) {
    engine->step();
    for (TurnEnd& end : engine->take_turn_ends()) {
      ASSERT_TRUE(engine->end_sample(end.request_id, end.sample, FinishReason::kStop).ok());
    }
  }
  done = engine->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].samples[0].token_ids,
            std::vector<int64_t>(greedy_ids.begin(),
                                 greedy_ids.begin() + done[0].samples[0].token_ids.size()));
}

TEST(EngineTurnsTest, BadContinuationsAreRefusedAndTheSampleKeepsWaiting) {
  auto model = shared_model("qwen2");
  EngineOptions options;
  options.max_seq_len = 32;
  auto engine = make_engine(model, options);
  GenerationRequest request = greedy("bad", kPrompts[0], /*max_new=*/20);
  request.multi_turn = true;
  request.turn_max_new_tokens = 2;
  ASSERT_TRUE(engine->submit(request).ok());
  EXPECT_EQ(engine->continue_sample("bad", 0, {1}).code(), absl::StatusCode::kNotFound);  // queued
  std::vector<TurnEnd> ends;
  for (int i = 0; i < 100 && ends.empty(); ++i) {
    engine->step();
    ends = engine->take_turn_ends();
  }
  ASSERT_EQ(ends.size(), 1u);
  const int64_t vocab = model->config().vocab_size;
  absl::Status s = engine->continue_sample("bad", 0, {1, vocab});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("observation token 1 has id"));
  s = engine->continue_sample("bad", 0, std::vector<int64_t>(30, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()), HasSubstr("leaves no room"));
  EXPECT_EQ(engine->continue_sample("bad", 1, {1}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->continue_sample("other", 0, {1}).code(), absl::StatusCode::kNotFound);
  // Still waiting: a good observation is taken.
  ASSERT_TRUE(engine->continue_sample("bad", 0, {1, 2}).ok());
  EXPECT_EQ(engine->end_sample("bad", 0, FinishReason::kStop).code(), absl::StatusCode::kNotFound);
  // The episode's budget (max_new_tokens) ends it without a turn end.
  while (!engine->idle()) {
    engine->step();
    for (TurnEnd& end : engine->take_turn_ends()) {
      ASSERT_TRUE(engine->continue_sample(end.request_id, end.sample, {3}).ok());
    }
  }
  std::vector<GroupResult> done = engine->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].samples[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(done[0].samples[0].token_ids.size(), 20u);
}

TEST(EngineTurnsTest, AbortEndsWaitingSamples) {
  auto engine = make_engine(shared_model("qwen2"));
  GenerationRequest request = greedy("aborted", kPrompts[1], /*max_new=*/20);
  request.multi_turn = true;
  request.turn_max_new_tokens = 2;
  request.n = 2;
  ASSERT_TRUE(engine->submit(request).ok());
  size_t ended = 0;
  for (int i = 0; i < 100 && ended < 2; ++i) {
    engine->step();
    ended += engine->take_turn_ends().size();
  }
  ASSERT_EQ(ended, 2u);
  ASSERT_TRUE(engine->abort("aborted").ok());
  EXPECT_TRUE(engine->idle());
  std::vector<GroupResult> done = engine->take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const Sample& s : done[0].samples) EXPECT_EQ(s.finish_reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace flywheel::rollout
