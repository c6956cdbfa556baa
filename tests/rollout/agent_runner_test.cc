// Agents as episodes: a Python agent (agent_protocol_check.py) talks to the runner's endpoint
// over real HTTP; the test checks what the episodes recorded against what the agent was told.
#include "flywheel/rollout/agent/agent_runner.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include <ATen/ATen.h>

#include "engine_test_util.h"
#include "flywheel/core/json.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rollout/logits_processor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scratch_dir.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kEos = 2;  // the char tokenizer's <eos>

// A scripted policy over the char tokenizer's text: "LONG" anywhere -> a's; after a </result>
// -> "6" and eos; after the last "=" -> <calc>2*3</calc> and eos.
class Script : public LogitsProcessor {
 public:
  static absl::StatusOr<std::unique_ptr<LogitsProcessor>> create(const LogitsProcessorParams&) {
    auto tokenizer = model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<LogitsProcessor>(new Script(std::move(*tokenizer)));
  }
  void apply(at::Tensor& logits, const std::vector<int64_t>& tokens) const override {
    const std::string text = tokenizer_->decode(tokens).value_or("");
    std::string target = "a";
    size_t from = std::string::npos;
    if (text.find("LONG") == std::string::npos) {
      from = text.rfind("</result>");
      if (from != std::string::npos) {
        from += 9;
        target = "6";
      } else {
        from = text.rfind('=') + 1;
        target = "<calc>2*3</calc>";
      }
    }
    int64_t next = kEos;
    if (from == std::string::npos) {
      next = *tokenizer_->token_to_id("a");
    } else {
      const std::string so_far = text.substr(from);
      if (so_far.size() < target.size()) {
        next = *tokenizer_->token_to_id(target.substr(so_far.size(), 1));
      }
    }
    const float kept = logits[next].item<float>();
    logits.fill_(-std::numeric_limits<float>::infinity());
    logits[next] = kept;
  }

 private:
  explicit Script(std::unique_ptr<model::Tokenizer> t) : tokenizer_(std::move(t)) {}
  std::unique_ptr<model::Tokenizer> tokenizer_;
};

core::Json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<core::Json> json = core::Json::parse(text.str());
  EXPECT_TRUE(json.ok()) << path << ": " << json.status();
  return json.ok() ? *json : core::Json();
}

// log_softmax of the model's full forward at each model token of the episode.
std::vector<float> recomputed_logprobs(const model::DecoderModel& m, const Episode& e) {
  std::vector<int64_t> tokens = e.prompt_ids;
  tokens.insert(tokens.end(), e.sample.token_ids.begin(), e.sample.token_ids.end());
  at::NoGradGuard no_grad;
  model::ForwardBatch b;
  const int64_t T = static_cast<int64_t>(tokens.size());
  b.tokens = at::tensor(tokens, at::kLong).view({1, T});
  b.positions = at::arange(T, at::kLong).view({1, T});
  at::Tensor logprobs = at::log_softmax(m.logits(m.forward(b))[0], -1);
  std::vector<float> out;
  const int64_t start = static_cast<int64_t>(e.prompt_ids.size());
  for (size_t i = 0; i < e.sample.token_ids.size(); ++i) {
    if (!e.sample.from_model[i]) continue;
    out.push_back(
        logprobs[start + static_cast<int64_t>(i) - 1][e.sample.token_ids[i]].item<float>());
  }
  return out;
}

TEST(AgentRunnerTest, AnAgentOverHttpIsRecordedAsOneExactTokenStream) {
  flywheel::testing::ScratchDir dir("agent_runner");
  core::PluginRegistry registry;
  auto& processors = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
  ASSERT_TRUE(processors.add("script", &Script::create).ok());
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  EngineContext context;
  context.registry = &registry;
  context.tokenizer = tokenizers.tokenizer.get();
  EngineOptions engine_options;
  engine_options.max_seq_len = 512;
  auto model = shared_model("qwen2");
  auto engine = make_engine(model, engine_options, context);

  AgentRunnerOptions options;
  // /usr/bin/python3: the test needs only its standard library, and a pyenv shim starts slower.
  options.agent.command = {"/usr/bin/python3",
                           std::string(FLYWHEEL_TEST_SOURCE_DIR) + "/agent_protocol_check.py"};
  options.agent.on_rewrite = core::OnRewrite::kDrop;
  options.agent.max_request_bytes = 65536;
  options.agent.timeout_s = 120;
  options.sampling.temperature = 1.0;
  options.sampling.max_new_tokens = 450;
  options.sampling.stop_token_ids = {kEos};
  options.sampling.logits_processors = {{"script", {}}};
  options.max_slots = 8;
  const std::string report = dir.sub("report");
  setenv("AGENT_REPORT", report.c_str(), 1);
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_THAT((*runner)->base_url(), ::testing::EndsWith("/v1"));

  EpisodeRequest request;
  request.id = "lease-1";
  request.prompt_ids = {5};
  auto record = std::make_shared<core::Json>(core::Json::object());
  record->set("prompt", "2*3=");
  request.record = record;
  request.n = 3;
  ASSERT_TRUE((*runner)->submit(request).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(*runner)->idle() && std::chrono::steady_clock::now() < deadline) (*runner)->step();
  std::vector<EpisodeGroup> groups = (*runner)->take_finished();
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].episodes.size(), 3u);
  const Episode& chat = groups[0].episodes[0];
  ASSERT_EQ(chat.sample.finish_reason, FinishReason::kStop) << chat.sample.error;
  const Episode& completions = groups[0].episodes[1];
  EXPECT_EQ(completions.sample.finish_reason, FinishReason::kError);
  EXPECT_THAT(completions.sample.error, HasSubstr("rewrites the episode's history"));
  const Episode& dropped = groups[0].episodes[2];
  ASSERT_EQ(dropped.sample.finish_reason, FinishReason::kStop) << dropped.sample.error;

  // The chat episode's stream: the prompt, the model's call, the tool result rendered alone,
  // the model's answer; model tokens as sampled, the rest masked.
  const model::Tokenizer& tok = *tokenizers.tokenizer;
  EXPECT_EQ(*tok.decode(chat.prompt_ids, {true}), "2*3=");
  const std::vector<int64_t> call = *tok.encode("<calc>2*3</calc>", {false});
  const std::vector<int64_t> result = *tok.encode("<result>6</result>", {false});
  std::vector<int64_t> expected = call;
  expected.insert(expected.end(), result.begin(), result.end());
  expected.push_back(tok.encode("6", {false})->front());
  expected.push_back(kEos);
  EXPECT_EQ(chat.sample.token_ids, expected);
  std::vector<uint8_t> mask(call.size(), 1);
  mask.insert(mask.end(), result.size(), 0);
  mask.insert(mask.end(), {1, 1});
  EXPECT_EQ(chat.sample.from_model, mask);
  EXPECT_EQ(chat.turn_ends, (std::vector<int64_t>{static_cast<int64_t>(call.size()),
                                                  static_cast<int64_t>(expected.size())}));
  EXPECT_EQ(chat.tool_calls, 1);
  ASSERT_TRUE(chat.reported_reward.has_value());
  EXPECT_DOUBLE_EQ(*chat.reported_reward, 0.75);  // the last stdout line with a reward
  EXPECT_EQ(chat.final_message.value_or(""), "6");

  // usage equals what was recorded; the log-probs returned are the recorded ones, which the
  // model's own full forward reproduces.
  const core::Json got = read_json(report + ".0");
  const core::Json::Array& usage = got.find("usage")->as_array();
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0].find("prompt_tokens")->as_int(), static_cast<int64_t>(chat.prompt_ids.size()));
  EXPECT_EQ(usage[0].find("completion_tokens")->as_int(), static_cast<int64_t>(call.size()));
  EXPECT_EQ(usage[1].find("prompt_tokens")->as_int(),
            static_cast<int64_t>(chat.prompt_ids.size() + call.size() + result.size()));
  EXPECT_EQ(usage[1].find("completion_tokens")->as_int(), 2);
  const core::Json::Array& returned = got.find("logprobs")->as_array();
  const std::vector<float> recomputed = recomputed_logprobs(*model, chat);
  std::vector<float> recorded;
  for (size_t i = 0; i < chat.sample.token_ids.size(); ++i) {
    if (chat.sample.from_model[i]) recorded.push_back(chat.sample.logprobs[i]);
  }
  ASSERT_EQ(recorded.size(), recomputed.size());
  for (size_t i = 0; i < recorded.size(); ++i) {
    EXPECT_NEAR(recorded[i], recomputed[i], 1e-4) << "model token " << i;
    if (i < returned.size()) {
      EXPECT_NEAR(returned[i].as_double(), recorded[i], 1e-6);
    }
  }
  EXPECT_EQ(returned.size(), call.size());
  const AgentRunnerStats stats = (*runner)->stats();
  EXPECT_GE(stats.rewrites, 1);
}

// A saturated engine answers 429 with Retry-After, and the agent that gets nothing to train on
// ends its episode with an error; the runner goes on.
TEST(AgentRunnerTest, ASaturatedEngineAnswers429) {
  flywheel::testing::ScratchDir dir("agent_runner_429");
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  EngineContext context;
  context.tokenizer = tokenizers.tokenizer.get();
  auto engine = make_engine(shared_model("qwen2"), {}, context);
  AgentRunnerOptions options;
  // /usr/bin/python3: the test needs only its standard library, and a pyenv shim starts slower.
  options.agent.command = {"/usr/bin/python3",
                           std::string(FLYWHEEL_TEST_SOURCE_DIR) + "/agent_protocol_check.py"};
  options.agent.on_rewrite = core::OnRewrite::kDrop;
  options.agent.max_queued_requests = 0;
  options.sampling.stop_token_ids = {kEos};
  const std::string report = dir.sub("report");
  setenv("AGENT_REPORT", report.c_str(), 1);
  setenv("AGENT_EXPECT", "429", 1);
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EpisodeRequest request;
  request.id = "lease-2";
  request.record = std::make_shared<core::Json>(core::Json::object());
  ASSERT_TRUE((*runner)->submit(request).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(*runner)->idle() && std::chrono::steady_clock::now() < deadline) (*runner)->step();
  unsetenv("AGENT_EXPECT");
  std::vector<EpisodeGroup> groups = (*runner)->take_finished();
  ASSERT_EQ(groups.size(), 1u);
  const Episode& e = groups[0].episodes[0];
  EXPECT_EQ(e.sample.finish_reason, FinishReason::kError);
  EXPECT_THAT(e.sample.error, HasSubstr("exited without a completion"));
  EXPECT_TRUE(read_json(report + ".0").find("saturated") != nullptr);
  EXPECT_EQ((*runner)->stats().agent_errors, 1);
}

// Issue 29: under on_rewrite segment, a request that rewrites the history starts a new token
// stream from the conversation rendered afresh; the episode ends with both, the earlier first.
// The earlier one holds the replies a request took up (the agent's second reply, which the
// rewrite did not carry, is discarded).
TEST(AgentRunnerTest, ARewrittenHistoryStartsASegment) {
  flywheel::testing::ScratchDir dir("agent_runner_segment");
  core::PluginRegistry registry;
  auto& processors = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
  ASSERT_TRUE(processors.add("script", &Script::create).ok());
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  EngineContext context;
  context.registry = &registry;
  context.tokenizer = tokenizers.tokenizer.get();
  auto engine = make_engine(shared_model("qwen2"), {}, context);
  AgentRunnerOptions options;
  options.agent.command = {"/usr/bin/python3",
                           std::string(FLYWHEEL_TEST_SOURCE_DIR) + "/agent_protocol_check.py"};
  ASSERT_EQ(options.agent.on_rewrite, core::OnRewrite::kSegment);  // the default
  options.sampling.max_new_tokens = 64;
  options.sampling.stop_token_ids = {kEos};
  options.sampling.logits_processors = {{"script", {}}};
  const std::string report = dir.sub("report");
  setenv("AGENT_REPORT", report.c_str(), 1);
  setenv("AGENT_EXPECT", "segment", 1);
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EpisodeRequest request;
  request.id = "lease-3";
  request.record = std::make_shared<core::Json>(core::Json::object());
  ASSERT_TRUE((*runner)->submit(request).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(*runner)->idle() && std::chrono::steady_clock::now() < deadline) (*runner)->step();
  unsetenv("AGENT_EXPECT");
  std::vector<EpisodeGroup> groups = (*runner)->take_finished();
  ASSERT_EQ(groups.size(), 1u);
  const Episode& e = groups[0].episodes[0];
  ASSERT_EQ(e.sample.finish_reason, FinishReason::kStop) << e.sample.error;
  const model::Tokenizer& tok = *tokenizers.tokenizer;
  std::vector<int64_t> call = *tok.encode("<calc>2*3</calc>", {false});
  call.push_back(kEos);
  ASSERT_EQ(e.earlier_segments.size(), 1u);
  const EpisodeSegment& earlier = e.earlier_segments[0];
  EXPECT_EQ(*tok.decode(earlier.prompt_ids, {true}), "2*3=");
  EXPECT_EQ(earlier.sample.token_ids, call);
  EXPECT_EQ(earlier.sample.from_model, std::vector<uint8_t>(call.size(), 1));
  EXPECT_EQ(earlier.turn_ends, std::vector<int64_t>{static_cast<int64_t>(call.size())});
  EXPECT_EQ(*tok.decode(e.prompt_ids, {true}), "7*7=");
  EXPECT_EQ(e.sample.token_ids, call);
  ASSERT_TRUE(e.reported_reward.has_value());
  EXPECT_DOUBLE_EQ(*e.reported_reward, 1.0);
  EXPECT_EQ((*runner)->stats().rewrites, 1);
  EXPECT_EQ((*runner)->stats().discarded_replies, 1);
}

// Runs a runner until it is idle (or `seconds` pass) and returns what finished.
std::vector<EpisodeGroup> run_until_idle(AgentRunner& runner, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!runner.idle() && std::chrono::steady_clock::now() < deadline) runner.step();
  return runner.take_finished();
}

EpisodeRequest agent_request(const std::string& id, const std::string& prompt, int64_t n) {
  EpisodeRequest request;
  request.id = id;
  auto record = std::make_shared<core::Json>(core::Json::object());
  record->set("prompt", prompt);
  request.record = record;
  request.n = n;
  return request;
}

// rollout.agent.mode persistent: a few long-lived runs of the agent take the episodes one at a
// time from their stdin and end each with a done line. Every episode records the same exact
// stream as a run of its own would; an agent that reports an error, crashes mid-episode or
// hangs past the deadline ends only its own episode, and a new run takes the next ones.
TEST(AgentRunnerTest, PersistentAgentsRunEpisodeAfterEpisode) {
  core::PluginRegistry registry;
  auto& processors = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
  ASSERT_TRUE(processors.add("script", &Script::create).ok());
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  EngineContext context;
  context.registry = &registry;
  context.tokenizer = tokenizers.tokenizer.get();
  auto engine = make_engine(shared_model("qwen2"), {}, context);
  AgentRunnerOptions options;
  options.agent.command = {"/usr/bin/python3",
                           std::string(FLYWHEEL_TEST_SOURCE_DIR) + "/persistent_agent.py"};
  options.agent.mode = core::AgentMode::kPersistent;
  options.agent.max_episodes = 2;
  options.agent.timeout_s = 20;
  options.sampling.max_new_tokens = 64;
  options.sampling.stop_token_ids = {kEos};
  options.sampling.logits_processors = {{"script", {}}};
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();

  ASSERT_TRUE((*runner)->submit(agent_request("a", "2*3=", 3)).ok());
  ASSERT_TRUE((*runner)->submit(agent_request("b", "2*3=", 2)).ok());
  std::vector<EpisodeGroup> groups = run_until_idle(**runner, 120);
  ASSERT_EQ(groups.size(), 2u);
  const model::Tokenizer& tok = *tokenizers.tokenizer;
  std::vector<int64_t> expected = *tok.encode("<calc>2*3</calc><result>6</result>6", {false});
  expected.push_back(kEos);
  for (const EpisodeGroup& g : groups) {
    for (const Episode& e : g.episodes) {
      ASSERT_EQ(e.sample.finish_reason, FinishReason::kStop) << e.sample.error;
      EXPECT_EQ(*tok.decode(e.prompt_ids, {true}), "2*3=");
      EXPECT_EQ(e.sample.token_ids, expected);
      EXPECT_EQ(e.tool_calls, 1);
      ASSERT_TRUE(e.reported_reward.has_value());
      EXPECT_DOUBLE_EQ(*e.reported_reward, 0.5);
    }
  }
  EXPECT_EQ((*runner)->stats().agent_starts, 2);  // 5 episodes, 2 runs

  ASSERT_TRUE((*runner)->submit(agent_request("c", "fail", 1)).ok());
  groups = run_until_idle(**runner, 60);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].episodes[0].sample.finish_reason, FinishReason::kError);
  EXPECT_THAT(groups[0].episodes[0].sample.error, HasSubstr("the task made no sense"));
  EXPECT_EQ((*runner)->stats().agent_starts, 2);

  ASSERT_TRUE((*runner)->submit(agent_request("d", "crash", 1)).ok());
  groups = run_until_idle(**runner, 60);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].episodes[0].sample.finish_reason, FinishReason::kError);
  EXPECT_THAT(groups[0].episodes[0].sample.error, HasSubstr("exit 3"));

  (*runner)->abort_all();
  ASSERT_TRUE((*runner)->submit(agent_request("e", "2*3=", 2)).ok());
  groups = run_until_idle(**runner, 60);
  ASSERT_EQ(groups.size(), 1u);
  for (const Episode& e : groups[0].episodes) {
    EXPECT_EQ(e.sample.finish_reason, FinishReason::kStop) << e.sample.error;
  }
  EXPECT_EQ((*runner)->stats().agent_starts, 3);  // the crashed run was replaced once
}

// Agents connect in bursts (urllib opens a connection per request): the endpoint listens with a
// backlog for all of them (httplib's default of 5 reset connections under load). `ss` shows a
// listening socket's backlog as its Send-Q.
TEST(AgentRunnerTest, TheEndpointListensWithABacklogForBurstsOfAgents) {
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  auto engine = make_engine(shared_model("qwen2"), {}, {});
  AgentRunnerOptions options;
  options.agent.command = {"/bin/true"};
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const std::string url = (*runner)->base_url();  // http://127.0.0.1:PORT/v1
  const std::string port = url.substr(url.rfind(':') + 1, url.size() - url.rfind(':') - 4);
  const std::string command = "ss -ltnH 'sport = :" + port + "'";
  FILE* ss = popen(command.c_str(), "r");
  ASSERT_NE(ss, nullptr);
  char line[512] = {0};
  const bool read = fgets(line, sizeof(line), ss) != nullptr;
  pclose(ss);
  ASSERT_TRUE(read) << command << " printed nothing";
  std::istringstream fields(line);
  std::string state;
  int64_t queued = 0, backlog = 0;
  fields >> state >> queued >> backlog;
  EXPECT_EQ(state, "LISTEN") << line;
  EXPECT_GE(backlog, 256) << line;
}

// A persistent agent that never ends its episode is killed at rollout.agent.timeout_s; the
// episode ends with an error naming the deadline.
TEST(AgentRunnerTest, WallClockAPersistentAgentPastTheDeadlineIsKilled) {
  model::TokenizerSetup tokenizers;
  tokenizers.tokenizer = *model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar);
  EngineContext context;
  context.tokenizer = tokenizers.tokenizer.get();
  auto engine = make_engine(shared_model("qwen2"), {}, context);
  AgentRunnerOptions options;
  options.agent.command = {"/usr/bin/python3",
                           std::string(FLYWHEEL_TEST_SOURCE_DIR) + "/persistent_agent.py"};
  options.agent.mode = core::AgentMode::kPersistent;
  options.agent.timeout_s = 1;
  options.sampling.stop_token_ids = {kEos};
  auto runner = AgentRunner::create(engine.get(), tokenizers, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE((*runner)->submit(agent_request("h", "hang", 1)).ok());
  std::vector<EpisodeGroup> groups = run_until_idle(**runner, 30);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].episodes[0].sample.finish_reason, FinishReason::kError);
  EXPECT_THAT(groups[0].episodes[0].sample.error, HasSubstr("rollout.agent.timeout_s"));
}

}  // namespace
}  // namespace flywheel::rollout
