// The episode runner: environments answer turns, observations are appended once, and a bad
// environment ends only its own episode.
#include "flywheel/rollout/episode_runner.h"

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_util.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rollout/logits_processor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

struct Count : EpisodeState {
  int64_t steps = 0;
  std::string mode;  // the record's: how to misbehave
};

// Answers turn t with the ids {5, 6, 7, t} and reward 0.5 (t + 1); done after `turns` turns
// (never with turns 0). A record's "mode" makes its episodes misbehave instead.
class ScriptedEnvironment : public Environment {
 public:
  explicit ScriptedEnvironment(int64_t turns) : turns_(turns) {}
  absl::StatusOr<EpisodeStart> reset(const core::Json& record) const override {
    const core::Json* mode = record.find("mode");
    if (mode != nullptr && mode->as_string() == "bad_reset") {
      return absl::InvalidArgumentError("the record has no 'answer'");
    }
    auto count = std::make_unique<Count>();
    if (mode != nullptr) count->mode = mode->as_string();
    EpisodeStart start;
    start.state = std::move(count);
    return start;
  }
  absl::StatusOr<EnvironmentStep> step(EpisodeState* state, const ModelTurn& turn) const override {
    auto* count = dynamic_cast<Count*>(state);
    if (count == nullptr || count->steps != turn.index) {
      return absl::InternalError("steps out of order");
    }
    ++count->steps;
    const std::string& mode = count->mode;
    EnvironmentStep out;
    if (mode == "throw") throw std::runtime_error("the tool crashed");
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(3));
    if (mode == "huge") out.observation.token_ids.assign(5000, 5);
    if (mode == "bad_id") out.observation.token_ids = {5, 1000000};
    if (mode == "bad_text") out.observation.text = "caf\xe9";  // Latin-1, not UTF-8
    if (mode.empty()) out.observation.token_ids = {5, 6, 7, turn.index};
    out.reward = 0.5 * static_cast<double>(turn.index + 1);
    out.tool_call = true;
    out.done = turns_ > 0 && turn.index + 1 >= turns_;
    return out;
  }

 private:
  int64_t turns_;
};

std::shared_ptr<core::Json> record(const std::string& mode = "") {
  auto r = std::make_shared<core::Json>(core::Json::object());
  if (!mode.empty()) r->set("mode", core::Json(mode));
  return r;
}

EpisodeRequest episodes(const std::string& id, int64_t n, int64_t max_new = 40,
                        const std::string& mode = "") {
  EpisodeRequest request;
  request.id = id;
  request.prompt_ids = kPrompts[0];
  request.record = record(mode);
  request.sampling.temperature = 0;
  request.sampling.max_new_tokens = max_new;
  request.n = n;
  return request;
}

std::vector<EpisodeGroup> run(EpisodeRunner& runner) {
  std::vector<EpisodeGroup> out;
  for (int guard = 0; guard < 100000 && !runner.idle(); ++guard) {
    runner.step();
    for (EpisodeGroup& g : runner.take_finished()) out.push_back(std::move(g));
  }
  return out;
}

TEST(EpisodeRunnerTest, EpisodesAlternateModelTurnsAndObservationsInOneStream) {
  auto engine = make_engine(shared_model("qwen2"));
  EpisodeOptions options;
  options.turn_max_new_tokens = 3;
  options.max_turns = 5;
  EpisodeRunner runner(engine.get(), std::make_shared<ScriptedEnvironment>(3), nullptr, options);
  ASSERT_TRUE(runner.submit(episodes("g", /*n=*/2)).ok());
  std::vector<EpisodeGroup> groups = run(runner);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].prompt_ids, kPrompts[0]);
  ASSERT_EQ(groups[0].episodes.size(), 2u);
  for (const Episode& e : groups[0].episodes) {
    EXPECT_EQ(e.sample.finish_reason, FinishReason::kStop) << e.sample.error;
    EXPECT_EQ(e.turn_ends, (std::vector<int64_t>{3, 10, 17}));
    EXPECT_EQ(e.turn_rewards, (std::vector<double>{0.5, 1.0, 1.5}));
    EXPECT_EQ(e.tool_calls, 3);
    ASSERT_EQ(e.sample.token_ids.size(), 17u);
    // Model turns of 3 tokens, observations {5, 6, 7, t} between them.
    const std::vector<uint8_t> mask = {1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
    EXPECT_EQ(e.sample.from_model, mask);
    EXPECT_EQ(std::vector<int64_t>(e.sample.token_ids.begin() + 3, e.sample.token_ids.begin() + 7),
              (std::vector<int64_t>{5, 6, 7, 0}));  // the answer to turn 0
    for (size_t i = 0; i < mask.size(); ++i) EXPECT_EQ(e.sample.versions[i], mask[i] ? 0 : -1) << i;
  }
  EXPECT_EQ(runner.stats().episodes, 2);
  EXPECT_EQ(runner.stats().env_steps, 6);
  // The prompt once, then each episode's tokens but its last once.
  EXPECT_EQ(engine->stats().computed_tokens, static_cast<int64_t>(kPrompts[0].size()) + 2 * 16);
}

TEST(EpisodeRunnerTest, EpisodesEndAtMaxTurnsOrAtTheTokenBudget) {
  auto engine = make_engine(shared_model("qwen2"));
  EpisodeOptions options;
  options.turn_max_new_tokens = 3;
  options.max_turns = 2;
  EpisodeRunner runner(engine.get(), std::make_shared<ScriptedEnvironment>(0), nullptr, options);
  ASSERT_TRUE(runner.submit(episodes("turns", 1)).ok());
  ASSERT_TRUE(runner.submit(episodes("tokens", 1, /*max_new=*/12)).ok());
  std::map<std::string, EpisodeGroup> groups;
  for (EpisodeGroup& g : run(runner)) groups[g.request_id] = std::move(g);
  ASSERT_EQ(groups.size(), 2u);
  const Episode& turns = groups["turns"].episodes[0];
  EXPECT_EQ(turns.sample.finish_reason, FinishReason::kLength);
  EXPECT_EQ(turns.turn_ends, (std::vector<int64_t>{3, 10}));
  // 12 tokens: 3 + 4 + 3, then the next observation leaves no room (or the engine cuts a turn).
  const Episode& tokens = groups["tokens"].episodes[0];
  EXPECT_EQ(tokens.sample.finish_reason, FinishReason::kLength);
  EXPECT_LE(tokens.sample.token_ids.size(), 12u);
  EXPECT_EQ(tokens.turn_ends.back(), static_cast<int64_t>(tokens.sample.token_ids.size()));
}

TEST(EpisodeRunnerTest, ABadEnvironmentEndsOnlyItsEpisodeWithAnError) {
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"throw", "threw: the tool crashed"},
      {"huge", "5000 tokens is longer than max_observation_tokens (64)"},
      {"bad_id", "outside the vocabulary"},
      {"bad_text", "cannot be tokenized"},
  };
  for (const auto& [mode, error] : cases) {
    auto engine = make_engine(shared_model("qwen2"));
    EpisodeOptions options;
    options.turn_max_new_tokens = 3;
    options.max_observation_tokens = 64;
    EpisodeRunner runner(engine.get(), std::make_shared<ScriptedEnvironment>(3), tokenizer->get(),
                         options);
    ASSERT_TRUE(runner.submit(episodes("bad", 2, 40, mode)).ok());
    std::vector<EpisodeGroup> groups = run(runner);
    ASSERT_EQ(groups.size(), 1u) << mode;
    for (const Episode& e : groups[0].episodes) {
      EXPECT_EQ(e.sample.finish_reason, FinishReason::kError) << mode;
      EXPECT_THAT(e.sample.error, HasSubstr(error)) << mode;
      EXPECT_EQ(e.turns(), 1) << mode;
    }
    EXPECT_EQ(runner.stats().env_errors, 2) << mode;
    // The engine is free again: another group runs to its end.
    ASSERT_TRUE(runner.submit(episodes("good", 1)).ok());
    groups = run(runner);
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].episodes[0].sample.finish_reason, FinishReason::kStop) << mode;
  }
}

// A step that hangs (3 s) past its deadline (0.3 s) ends its episode; the runner goes on.
TEST(EpisodeRunnerTest, WallClockAStepPastItsDeadlineEndsItsEpisode) {
  auto engine = make_engine(shared_model("qwen2"));
  EpisodeOptions options;
  options.turn_max_new_tokens = 3;
  options.step_timeout_s = 0.3;
  EpisodeRunner runner(engine.get(), std::make_shared<ScriptedEnvironment>(3), nullptr, options);
  ASSERT_TRUE(runner.submit(episodes("hangs", 2, 40, "hang")).ok());
  ASSERT_TRUE(runner.submit(episodes("good", 1)).ok());
  std::map<std::string, EpisodeGroup> groups;
  for (EpisodeGroup& g : run(runner)) groups[g.request_id] = std::move(g);
  ASSERT_EQ(groups.size(), 2u);
  for (const Episode& e : groups["hangs"].episodes) {
    EXPECT_EQ(e.sample.finish_reason, FinishReason::kError);
    EXPECT_THAT(e.sample.error, HasSubstr("took longer than step_timeout_s (0.3 s)"));
  }
  EXPECT_EQ(groups["good"].episodes[0].sample.finish_reason, FinishReason::kStop);
  EXPECT_EQ(runner.stats().env_timeouts, 2);
}

TEST(EpisodeRunnerTest, AResetThatFailsIsAnErrorNamingTheEpisode) {
  auto engine = make_engine(shared_model("qwen2"));
  EpisodeRunner runner(engine.get(), std::make_shared<ScriptedEnvironment>(3), nullptr, {});
  EpisodeRequest request = episodes("r", 2, 40, "bad_reset");
  absl::Status s = runner.submit(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("episode 0 of 'r': reset: the record has no 'answer'"));
  EXPECT_TRUE(runner.idle());
  EXPECT_TRUE(engine->idle());
  request.record = nullptr;
  EXPECT_THAT(std::string(runner.submit(request).message()), HasSubstr("no record"));
}

// Replies `reply` (text) to every turn; done after `turns` turns.
class TextEnvironment : public Environment {
 public:
  TextEnvironment(std::string reply, int64_t turns) : reply_(std::move(reply)), turns_(turns) {}
  absl::StatusOr<EpisodeStart> reset(const core::Json&) const override { return EpisodeStart{}; }
  absl::StatusOr<EnvironmentStep> step(EpisodeState*, const ModelTurn& turn) const override {
    EnvironmentStep out;
    out.observation.text = reply_;
    out.done = turn.index + 1 >= turns_;
    return out;
  }

 private:
  std::string reply_;
  int64_t turns_;
};

// A scripted policy: every logit but that of `id` is -inf.
class Force : public LogitsProcessor {
 public:
  static absl::StatusOr<std::unique_ptr<LogitsProcessor>> create(const LogitsProcessorParams& p) {
    return std::unique_ptr<LogitsProcessor>(new Force(std::stoll(p.at("id"))));
  }
  void apply(at::Tensor& logits, const std::vector<int64_t>&) const override {
    const float kept = logits[id_].item<float>();
    logits.fill_(-std::numeric_limits<float>::infinity());
    logits[id_] = kept;
  }

 private:
  explicit Force(int64_t id) : id_(id) {}
  int64_t id_;
};

struct Scripted {
  core::PluginRegistry registry;
  std::unique_ptr<GenerationEngine> engine;

  Scripted() {
    auto& processors = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
    EXPECT_TRUE(processors.add("force", &Force::create).ok());
    EngineContext context;
    context.registry = &registry;
    engine = make_engine(shared_model("qwen2"), {}, context);
  }
};

EpisodeRequest forced(int64_t id, int64_t max_new = 30) {
  EpisodeRequest request = episodes("forced", 1, max_new);
  request.sampling.logits_processors = {{"force", {{"id", std::to_string(id)}}}};
  return request;
}

std::vector<int64_t> join(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Text replies sit inside the chat template's turn markers; the end-of-turn marker is added only
// when the model's turn did not end with it.
TEST(EpisodeRunnerTest, TextRepliesAreWrappedInTheTurnMarkers) {
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  model::EncodeOptions plain;
  plain.add_special_tokens = false;
  const std::vector<int64_t> ok = *(*tokenizer)->encode("ok", plain);
  EpisodeOptions options;
  options.markers = {/*end_of_turn=*/{9}, /*open=*/{10, 11}, /*close=*/{12}};
  for (const bool ends_with_marker : {true, false}) {
    Scripted s;
    options.turn_max_new_tokens = ends_with_marker ? 5 : 2;
    EpisodeRunner runner(s.engine.get(), std::make_shared<TextEnvironment>("ok", 2),
                         tokenizer->get(), options);
    EpisodeRequest request = forced(ends_with_marker ? 9 : 8);
    request.sampling.stop_token_ids = {9};  // the template's end of turn
    ASSERT_TRUE(runner.submit(request).ok());
    std::vector<EpisodeGroup> groups = run(runner);
    ASSERT_EQ(groups.size(), 1u);
    const Sample& sample = groups[0].episodes[0].sample;
    EXPECT_EQ(sample.finish_reason, FinishReason::kStop) << sample.error;
    const std::vector<int64_t> turn =
        ends_with_marker ? std::vector<int64_t>{9} : std::vector<int64_t>{8, 8};
    const std::vector<int64_t> reply =
        ends_with_marker ? join({{10, 11}, ok, {12}}) : join({{9, 10, 11}, ok, {12}});
    EXPECT_EQ(sample.token_ids, join({turn, reply, turn})) << ends_with_marker;
  }
}

// Issue 28's acceptance: with a BPE tokenizer whose merge "a b" -> "ab" spans a turn boundary,
// re-tokenizing the decoded conversation gives other ids than were sampled and appended; the
// runner's stream is exactly the turns and replies as they were.
TEST(EpisodeRunnerTest, TheStreamIsNeverReTokenizedEvenWhereABpeMergeSpansTurns) {
  const std::string json = R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                      "use_regex": false},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
      "ignore_merges": false, "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3}, "merges": ["a b"]}})";
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> bpe =
      model::load_hf_tokenizer_json(json, "bpe");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  Scripted s;
  EpisodeOptions options;
  options.turn_max_new_tokens = 1;
  EpisodeRunner runner(s.engine.get(), std::make_shared<TextEnvironment>("b", 3), bpe->get(),
                       options);
  ASSERT_TRUE(runner.submit(forced(/*"a"=*/0)).ok());
  std::vector<EpisodeGroup> groups = run(runner);
  ASSERT_EQ(groups.size(), 1u);
  const Sample& sample = groups[0].episodes[0].sample;
  ASSERT_EQ(sample.finish_reason, FinishReason::kStop) << sample.error;
  // Model "a", environment "b" (tokenized on its own), three turns: the ids as produced.
  EXPECT_EQ(sample.token_ids, (std::vector<int64_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(sample.from_model, (std::vector<uint8_t>{1, 0, 1, 0, 1}));
  // What re-tokenizing the decoded conversation would give instead: "ab" merged across turns.
  model::EncodeOptions plain;
  plain.add_special_tokens = false;
  const std::string text = *(*bpe)->decode(sample.token_ids);
  EXPECT_EQ(text, "ababa");
  EXPECT_EQ(*(*bpe)->encode(text, plain), (std::vector<int64_t>{3, 3, 0}));
}

}  // namespace
}  // namespace flywheel::rollout
