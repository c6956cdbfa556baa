// The rollout worker loop (flywheel_rollout_worker) against a real
// controller on loopback, a tiny model and a test reward; the test plays the learners: it takes
// batches, bumps the version and publishes weights. Covers the staleness bound with slow weight
// fetches, a controller restart (a new incarnation at an older version) and the end of training.
#include "flywheel/rollout/worker/rollout_worker.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "../model/test_models.h"
#include "absl/strings/match.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/core/json.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/rewards/composite_reward.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kGroupSize = 2;
constexpr int64_t kGroupsPerStep = 2;

// Scores a completion by its length's parity: groups with both rewards occur.
class ParityReward final : public rewards::RewardFunction {
 public:
  absl::StatusOr<rewards::RewardOutput> score(const rewards::RewardInput& input) const override {
    return rewards::RewardOutput{static_cast<double>(input.completion.size() % 2), {}};
  }
};

// Weights from the controller, each round `delay` late (a slow network or a large model).
class SlowWeightSource final : public WeightSource {
 public:
  SlowWeightSource(buffer::ControllerClient* client, std::chrono::milliseconds delay)
      : inner_(client), delay_(delay) {}
  absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                  core::PublishedWeights* into) override {
    std::this_thread::sleep_for(delay_);  // simulates a slow transfer, not a synchronisation
    return inner_.fetch_into(newer_than, timeout_s, into);
  }

 private:
  GrpcWeightSource inner_;
  std::chrono::milliseconds delay_;
};

model::ModelConfig worker_model_config() {
  model::ModelConfig c = model::testing::tiny_config("qwen2");
  c.vocab_size = 100;  // the default character tokenizer's
  return c;
}

// The engine's parameters as a publication of `version`.
core::PublishedWeights publication(const model::DecoderModel& model, int64_t version) {
  core::PublishedWeights w;
  w.version = version;
  w.bucket_bytes = 1 << 16;
  for (const auto& [name, p] : model.named_parameters()) {
    at::Tensor t = p.detach().to(at::kFloat).contiguous();
    const uint64_t size = static_cast<uint64_t>(t.numel()) * 4;
    w.tensors.push_back({name, "F32", t.sizes().vec(), w.payload.size(), size});
    w.payload.append(static_cast<const char*>(t.data_ptr()), size);
  }
  return w;
}

// One controller start: its core, server and weight store.
struct Controller {
  Controller(int64_t max_staleness, uint32_t incarnation, int64_t version, int port = 0) {
    std::vector<std::string> lines;
    for (int i = 0; i < 64; ++i) {
      lines.push_back("{\"prompt\": \"" + std::to_string(i) + "+" + std::to_string(i) + "=\"}");
    }
    dataset = std::move(*buffer::PromptDataset::from_lines(lines, "test"));
    buffer::ControllerOptions o;
    o.num_prompts = dataset->size();
    o.groups_per_step = kGroupsPerStep;
    o.max_staleness = max_staleness;
    o.limits.vocab_size = 100;
    o.limits.group_size = kGroupSize;
    o.incarnation = incarnation;
    o.worker_timeout_s = 30;
    core = std::move(*buffer::ControllerCore::create(o));
    core->set_version(version);
    buffer::ControllerServerOptions so;
    so.bind_address = "127.0.0.1:" + std::to_string(port);
    so.heartbeat_interval_s = 0.05;
    so.weights_dtype = "float32";
    auto started = buffer::ControllerServer::start(core.get(), dataset.get(), so, nullptr, &store);
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(*started);
  }
  void publish(const model::DecoderModel& model, int64_t version) {
    ASSERT_TRUE(store.publish(publication(model, version)).ok());
    core->set_weights_version(version);
  }
  std::unique_ptr<buffer::PromptDataset> dataset;
  std::unique_ptr<buffer::ControllerCore> core;
  buffer::WeightStore store;
  std::unique_ptr<buffer::ControllerServer> server;
};

// Sleeps before every token (a large model's decode, so that a stop finds samples half done)
// and counts the tokens.
class SlowDecode final : public LogitsProcessor {
 public:
  explicit SlowDecode(std::atomic<int64_t>* tokens) : tokens_(tokens) {}
  void apply(at::Tensor&, const std::vector<int64_t>&) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    tokens_->fetch_add(1);
  }

 private:
  std::atomic<int64_t>* tokens_;
};

// What differs between the workers of the tests.
struct WorkerSetup {
  std::chrono::milliseconds fetch_delay{0};
  // Set: every sample is an episode of at most 3 turns of 2 tokens.
  std::shared_ptr<const Environment> environment;
  std::string id = "w0";
  int64_t max_new_tokens = 4;
  bool slow_decode = false;
};

// A worker with its own engine, tokenizer, rewards and client, run on a thread.
class Worker {
 public:
  Worker(int port, std::chrono::milliseconds fetch_delay,
         std::shared_ptr<const Environment> environment = nullptr)
      : Worker(port, WorkerSetup{fetch_delay, std::move(environment)}) {}
  Worker(int port, const WorkerSetup& setup) {
    const std::chrono::milliseconds fetch_delay = setup.fetch_delay;
    std::shared_ptr<const Environment> environment = setup.environment;
    auto& processors = registry_.get<LogitsProcessor, const LogitsProcessorParams&>();
    EXPECT_TRUE(processors
                    .add("slow",
                         [this](const LogitsProcessorParams&)
                             -> absl::StatusOr<std::unique_ptr<LogitsProcessor>> {
                           return std::unique_ptr<LogitsProcessor>(new SlowDecode(&tokens_));
                         })
                    .ok());
    model::DecoderOptions decoder;
    auto model = model::DecoderModel::create(worker_model_config(), decoder);
    EXPECT_TRUE(model.ok()) << model.status();
    (*model)->init_random(5);
    rollout::EngineOptions engine_options;
    engine_options.max_slots = 4;
    engine_options.max_seq_len = 32;
    auto engine = rollout::GenerationEngine::create(std::move(*model), engine_options,
                                                    {nullptr, &registry_, /*initial_version=*/-1});
    EXPECT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    tokenizers_.tokenizer = std::move(*model::load_tokenizer("", "char"));
    encoder_ = std::make_unique<PromptEncoder>(tokenizers_, core::DataOptions{}, 100);
    auto reward = std::make_shared<const rewards::CompositeReward>(
        std::vector<rewards::WeightedReward>{{"parity", 1.0, std::make_shared<ParityReward>()}},
        0.0);
    pool_ = std::move(*rewards::ScoringPool::create(reward, {1, 64, 10, nullptr}));
    buffer::ControllerClientOptions co;
    co.address = "127.0.0.1:" + std::to_string(port);
    co.worker_id = setup.id;
    co.deadline_s = 10;
    co.reconnect_timeout_s = 30;
    client_ = std::move(*buffer::ControllerClient::connect(co));
    source_ = std::make_unique<SlowWeightSource>(client_.get(), fetch_delay);
    RolloutWorkerOptions o;
    o.worker_id = setup.id;
    o.group_size = kGroupSize;
    o.max_slots = 4;
    o.sampling.max_new_tokens = setup.max_new_tokens;
    if (setup.slow_decode) o.sampling.logits_processors = {{"slow", {}}};
    o.sampling.temperature = 1.0;
    o.sampling.seed = 3;
    o.weight_timeout_s = 30;
    o.poll_interval_s = 0.01;
    RolloutWorkerParts parts;
    parts.client = client_.get();
    parts.weights = source_.get();
    parts.engine = engine_.get();
    parts.encoder = encoder_.get();
    parts.tokenizer = tokenizers_.tokenizer.get();
    parts.pool = pool_.get();
    if (environment) {
      o.sampling.max_new_tokens = 16;
      o.episodes.max_turns = 3;
      o.episodes.turn_max_new_tokens = 2;
      parts.environment = std::move(environment);
    }
    worker_ = std::make_unique<RolloutWorker>(o, parts);
    thread_ = std::thread([this] {
      status_ = worker_->run([this] { return stop_.load(); });
      returned_.store(true);
    });
  }
  // Asks run() to stop (as a signal would).
  void stop() { stop_.store(true); }
  // Waits for run() to return (the test ends training first, or asks it to stop).
  absl::Status join() {
    thread_.join();
    pool_.reset();
    return status_;
  }
  bool returned() const { return returned_.load(); }  // run() has returned
  RolloutWorkerStats stats() const { return worker_->stats(); }
  int64_t slow_tokens() const { return tokens_.load(); }  // sampled with slow_decode
  const model::DecoderModel& model() const { return engine_->model(); }

 private:
  std::atomic<int64_t> tokens_{0};
  core::PluginRegistry registry_;
  std::unique_ptr<rollout::GenerationEngine> engine_;
  model::TokenizerSetup tokenizers_;
  std::unique_ptr<PromptEncoder> encoder_;
  std::unique_ptr<rewards::ScoringPool> pool_;
  std::unique_ptr<buffer::ControllerClient> client_;
  std::unique_ptr<WeightSource> source_;
  std::unique_ptr<RolloutWorker> worker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> returned_{false};
  std::thread thread_;
  absl::Status status_;
};

// Waits (polling, with a generous bound) until `done()`.
template <typename Predicate>
bool eventually(Predicate done, double seconds = 60) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Plays the learners for `steps` steps from `first`: takes each batch, checks its staleness,
// bumps the version (a slow learner: each step takes `step_time`) and publishes the weights.
// Returns the largest staleness trained.
int64_t learn(Controller& c, const model::DecoderModel& model, int64_t first, int64_t steps,
              std::chrono::milliseconds step_time) {
  int64_t worst = 0;
  for (int64_t v = first; v < first + steps; ++v) {
    EXPECT_TRUE(eventually([&] { return c.core->buffered() >= kGroupsPerStep; })) << "step " << v;
    auto batch = c.core->take_batch(kGroupsPerStep);
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) return worst;
    for (const buffer::TrajectoryGroup& g : *batch) worst = std::max(worst, v - g.min_version());
    std::this_thread::sleep_for(step_time);  // the optimizer step
    c.publish(model, v + 1);
    c.core->set_version(v + 1);
  }
  return worst;
}

// Item 7 of issue 26: with max_staleness 2 the worker generates only with weights of at least
// the grant's version, so however slowly weights arrive nothing goes stale. (With weights one
// version older allowed, groups reached 3 versions of staleness and were dropped.)
TEST(RolloutWorkerTest, SlowWeightsNeverMakeGroupsStaleWithMaxStalenessTwo) {
  Controller c(/*max_staleness=*/2, /*incarnation=*/7, /*version=*/0);
  Worker w(c.server->port(), std::chrono::milliseconds(60));
  c.publish(w.model(), 0);
  const int64_t worst = learn(c, w.model(), 0, /*steps=*/10, std::chrono::milliseconds(40));
  c.core->close();
  EXPECT_TRUE(w.join().ok());
  const buffer::ControllerCounters k = c.core->counters();
  EXPECT_EQ(k.stale_dropped, 0);
  EXPECT_EQ(k.rejected_invalid, 0);
  EXPECT_LE(worst, 2);
  EXPECT_GE(k.consumed, 10 * kGroupsPerStep);
}

// Answers each turn with the ids {10, 11, 12} and reward 0.25; the episode ends after 2 turns.
class TwoTurns final : public Environment {
 public:
  absl::StatusOr<EpisodeStart> reset(const core::Json&) const override { return EpisodeStart{}; }
  absl::StatusOr<EnvironmentStep> step(EpisodeState*, const ModelTurn& turn) const override {
    EnvironmentStep out;
    out.observation.token_ids = {10, 11, 12};
    out.reward = 0.25;
    out.done = turn.index == 1;
    out.tool_call = turn.index == 0;
    return out;
  }
};

// Issue 28: with an environment each sample is an episode; its trajectory is the whole stream,
// the environment's tokens masked out of the loss and within the staleness bound, and its reward
// the rewards' score plus the environment's.
TEST(RolloutWorkerTest, EpisodesArePushedWithTheEnvironmentsTokensMasked) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/9, 0);
  Worker w(c.server->port(), std::chrono::milliseconds(0), std::make_shared<TwoTurns>());
  c.publish(w.model(), 0);
  int64_t checked = 0;
  for (int64_t v = 0; v < 3; ++v) {
    ASSERT_TRUE(eventually([&] { return c.core->buffered() >= kGroupsPerStep; })) << v;
    auto batch = c.core->take_batch(kGroupsPerStep);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const buffer::TrajectoryGroup& g : *batch) {
      EXPECT_GE(g.min_version(), v - 1);
      for (const buffer::Trajectory& t : g.trajectories) {
        // Turn 0 (2 tokens), the reply (3), turn 1 (2): the environment said done.
        ASSERT_EQ(t.response_ids.size(), 7u);
        EXPECT_EQ(t.loss_mask, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 1}));
        EXPECT_EQ(std::vector<int32_t>(t.response_ids.begin() + 2, t.response_ids.begin() + 5),
                  (std::vector<int32_t>{10, 11, 12}));
        for (int32_t version : t.versions) EXPECT_GE(version, 0);
        // The parity reward (0 or 1) of the whole conversation, plus 2 x 0.25.
        EXPECT_TRUE(t.reward == 0.5 || t.reward == 1.5) << t.reward;
        EXPECT_EQ(t.finish_reason, "stop");
        // What the learner's per-turn credit and episode metrics read.
        EXPECT_EQ(t.turn_ends, (std::vector<int32_t>{2, 7}));
        EXPECT_EQ(t.turn_rewards, (std::vector<double>{0.25, 0.25}));
        EXPECT_EQ(t.tool_calls, 1);
        EXPECT_EQ(t.env_step_seconds.size(), 2u);
        ++checked;
      }
    }
    c.publish(w.model(), v + 1);
    c.core->set_version(v + 1);
  }
  c.core->close();
  EXPECT_TRUE(w.join().ok());
  EXPECT_EQ(checked, 3 * kGroupsPerStep * kGroupSize);
  EXPECT_EQ(c.core->counters().rejected_invalid, 0);
}

// Item 6: the controller restarts (new incarnation, back at version 1, on the same port) while
// the worker holds weights of version 4. The worker drops its work, takes version 1 and feeds
// the new controller groups it accepts: none is rejected as invalid (tokens "from the future").
TEST(RolloutWorkerTest, AControllerRestartAtAnOlderVersionIsFollowed) {
  auto first = std::make_unique<Controller>(/*max_staleness=*/1, /*incarnation=*/11, 0);
  const int port = first->server->port();
  Worker w(port, std::chrono::milliseconds(0));
  first->publish(w.model(), 0);
  learn(*first, w.model(), 0, /*steps=*/4, std::chrono::milliseconds(0));
  first->server->shutdown();
  first.reset();
  Controller second(/*max_staleness=*/1, /*incarnation=*/12, /*version=*/1, port);
  second.publish(w.model(), 1);
  learn(second, w.model(), 1, /*steps=*/4, std::chrono::milliseconds(0));
  second.core->close();
  EXPECT_TRUE(w.join().ok());
  const buffer::ControllerCounters k = second.core->counters();
  // Groups of the first start still being pushed when it went away may reach the second one and
  // be refused as unknown leases (counted, harmless); none is refused as invalid.
  EXPECT_EQ(k.rejected_invalid, 0);
  EXPECT_GE(k.consumed, 4 * kGroupsPerStep);
  EXPECT_EQ(w.stats().controller_restarts, 1);
}

// Item 9: training ends (close) while the worker generates; it hears it in a heartbeat, gives
// its leases back and returns OK, also when the controller shuts down right after.
TEST(RolloutWorkerTest, TheEndOfTrainingIsASuccessEvenOnceTheControllerIsGone) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/5, 0);
  Worker w(c.server->port(), std::chrono::milliseconds(0));
  c.publish(w.model(), 0);
  learn(c, w.model(), 0, /*steps=*/2, std::chrono::milliseconds(0));
  c.core->close();
  ASSERT_TRUE(
      eventually([&] { return c.core->settled(buffer::ControllerServer::monotonic_seconds()); }));
  c.server->shutdown();
  EXPECT_TRUE(w.join().ok());
}

// A worker still waiting for its first weights when a heartbeat says training is over ends at
// once with OK once the controller shuts down; before, it waited until the heartbeats had been
// unanswered for reconnect_timeout_s (30 s here; CI saw a restarted worker hang so).
TEST(RolloutWorkerTest, TheEndOfTrainingEndsAWaitForWeights) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/6, 0);
  Worker w(c.server->port(), std::chrono::milliseconds(0));  // nothing is ever published
  ASSERT_TRUE(eventually([&] {
    return absl::StrContains(c.core->workers_heard(buffer::ControllerServer::monotonic_seconds()),
                             "w0");
  }));
  c.core->close();
  ASSERT_TRUE(
      eventually([&] { return c.core->settled(buffer::ControllerServer::monotonic_seconds()); }));
  c.server->shutdown();
  EXPECT_TRUE(eventually([&] { return w.returned(); }, /*seconds=*/15));
  EXPECT_TRUE(w.join().ok());
  EXPECT_EQ(w.stats().weight_updates, 0);
}

// Weight application: versions published with changed parameters reach the engine, which then
// holds exactly them, and each applied version is acknowledged with the matching checksum.
TEST(RolloutWorkerTest, AppliesPublishedWeightsAndAcknowledgesThemWithTheirChecksum) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/9, 0);
  Worker w(c.server->port(), std::chrono::milliseconds(0));
  model::DecoderOptions decoder;
  auto trained = model::DecoderModel::create(worker_model_config(), decoder);
  ASSERT_TRUE(trained.ok()) << trained.status();
  (*trained)->init_random(77);  // other weights than the worker's engine starts with
  c.publish(**trained, 0);
  learn(c, **trained, 0, /*steps=*/3, std::chrono::milliseconds(0));
  ASSERT_TRUE(eventually([&] { return c.store.worker_versions()["w0"] == 3; }));
  for (const auto& [name, p] : (*trained)->named_parameters()) {
    bool found = false;
    for (const auto& [engine_name, q] : w.model().named_parameters()) {
      if (engine_name != name) continue;
      found = true;
      EXPECT_TRUE(at::equal(p, q)) << name;
    }
    EXPECT_TRUE(found) << name;
  }
  const buffer::WeightStore::AckCounters acks = c.store.ack_counters();
  EXPECT_GE(acks.acks, 1);
  EXPECT_EQ(acks.mismatches, 0);
  EXPECT_EQ(acks.rejected, 0);
  c.core->close();
  EXPECT_TRUE(w.join().ok());
  EXPECT_GE(w.stats().weight_updates, 1);
}

// A stop request (a signal under `flywheel rollout`) ends run() with OK, and the leases the
// worker holds are given back for other workers: here leases granted at version 1 while its
// weights (2 s per fetch) are still on their way, and groups of version 0 it had begun.
TEST(RolloutWorkerTest, AStopGivesTheLeasesItHoldsBack) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/3, 0);
  Worker w(c.server->port(), std::chrono::milliseconds(2000));
  c.publish(w.model(), 0);
  learn(c, w.model(), 0, /*steps=*/1, std::chrono::milliseconds(0));  // publishes version 1
  // Leases granted from now on are at version 1, and wait 2 s for its weights: the worker holds
  // them when it stops (leases of version 0 in flight now may be pushed before it does).
  const int64_t granted_at_0 = c.core->counters().granted;
  ASSERT_TRUE(eventually([&] { return c.core->counters().granted > granted_at_0; }));
  w.stop();
  EXPECT_TRUE(w.join().ok());
  // Given back as they are, or with their samples so far when they had begun (issue 30).
  EXPECT_GE(w.stats().leases_released + w.stats().groups_handed_over, 1);
  EXPECT_TRUE(eventually([&] { return c.core->in_flight() == 0; }, 10));
}

// The partial generations a controller holds (its snapshot's "partials"), by prompt index.
std::map<int64_t, std::vector<std::vector<int64_t>>> partial_tokens(const Controller& c) {
  std::map<int64_t, std::vector<std::vector<int64_t>>> out;
  absl::StatusOr<core::Json> snapshot = core::Json::parse(c.core->snapshot());
  EXPECT_TRUE(snapshot.ok());
  for (const core::Json& p : snapshot->find("partials")->as_array()) {
    auto& samples = out[p.find("prompt")->as_int()];
    for (const core::Json& sample : p.find("samples")->as_array()) {
      std::vector<int64_t> ids;
      for (const core::Json& id : sample.find("token_ids")->as_array()) ids.push_back(id.as_int());
      samples.push_back(std::move(ids));
    }
  }
  return out;
}

// Issue 30, preemption: a worker stopped in the middle of its groups (a spot node's SIGTERM)
// hands each back with its samples so far; the controller re-issues the prompts with them, and
// another worker continues every sample from where it stopped (its tokens, log-probs and versions
// kept, then decoded further) instead of generating it again.
TEST(RolloutWorkerTest, AStoppedWorkersSamplesAreContinuedByAnother) {
  Controller c(/*max_staleness=*/1, /*incarnation=*/13, 0);
  WorkerSetup slow;
  slow.id = "preempted";
  slow.max_new_tokens = 24;
  slow.slow_decode = true;  // 15 ms a token: 24 tokens take 0.36 s
  auto preempted = std::make_unique<Worker>(c.server->port(), slow);
  c.publish(preempted->model(), 0);
  // Two groups of 2 samples at 3 tokens or so each: some tokens in, far from all 24.
  ASSERT_TRUE(eventually([&] { return preempted->slow_tokens() >= 12; }));
  preempted->stop();
  ASSERT_TRUE(preempted->join().ok());
  const RolloutWorkerStats handed = preempted->stats();
  const buffer::ControllerCounters after_stop = c.core->counters();
  ASSERT_GE(handed.groups_handed_over, 1);
  EXPECT_GE(handed.handed_over_tokens, 8);
  EXPECT_EQ(after_stop.partials_returned, handed.groups_handed_over);
  const auto partials = partial_tokens(c);
  ASSERT_EQ(static_cast<int64_t>(partials.size()), handed.groups_handed_over);

  WorkerSetup fast;
  fast.id = "successor";
  fast.max_new_tokens = 24;
  Worker successor(c.server->port(), fast);
  int64_t continued = 0;
  for (int64_t v = 0; v < 3; ++v) {
    ASSERT_TRUE(eventually([&] { return c.core->buffered() >= kGroupsPerStep; })) << v;
    std::vector<buffer::PromptRef> prompts;
    auto batch = c.core->take_batch(kGroupsPerStep, &prompts);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (size_t g = 0; g < batch->size(); ++g) {
      auto it = partials.find(prompts[g].prompt);
      if (it == partials.end()) continue;
      ++continued;
      const auto& trajectories = (*batch)[g].trajectories;
      ASSERT_EQ(trajectories.size(), it->second.size());
      for (size_t i = 0; i < trajectories.size(); ++i) {
        const std::vector<int32_t>& got = trajectories[i].response_ids;
        const std::vector<int64_t>& before = it->second[i];
        ASSERT_GE(got.size(), before.size());
        EXPECT_TRUE(std::equal(before.begin(), before.end(), got.begin()))
            << "prompt " << prompts[g].prompt << " sample " << i;
        EXPECT_LE(got.size(), 24u);
      }
    }
    c.publish(successor.model(), v + 1);
    c.core->set_version(v + 1);
  }
  c.core->close();
  EXPECT_TRUE(successor.join().ok());
  const buffer::ControllerCounters k = c.core->counters();
  EXPECT_EQ(k.partials_resumed + k.partials_discarded, handed.groups_handed_over);
  EXPECT_GE(k.partials_resumed, 1);
  EXPECT_EQ(k.resumed_tokens, successor.stats().resumed_tokens);
  EXPECT_EQ(successor.stats().groups_resumed, k.partials_resumed);
  EXPECT_EQ(k.rejected_invalid, 0);
  EXPECT_GE(continued, 1);  // a continued group was trained on, its samples extended
}

}  // namespace
}  // namespace flywheel::rollout
