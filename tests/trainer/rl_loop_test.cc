// The RL loop without processes: a fake policy (counts its steps) fed by an in-memory batch
// source, and rank 0's controller source over a real ControllerCore. Covers steps, stop, the
// end of the data, resume, the eval / checkpoint / publication cadences, staleness accounting,
// kWait and no-progress answers, and errors of the step and the hooks.
#include "flywheel/trainer/rl_loop.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "flywheel/core/file_io.h"
#include "flywheel/trainer/controller_batch_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scratch_dir.h"

namespace flywheel::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One group of two trajectories whose tokens were generated at `version`.
buffer::TrajectoryGroup group_at(int64_t version, const std::string& id = "g") {
  buffer::TrajectoryGroup g;
  g.group_id = id;
  for (int i = 0; i < 2; ++i) {
    buffer::Trajectory t;
    t.prompt_ids = {1, 2, 3};
    t.response_ids = {4, 5};
    t.loss_mask = {1, 1};
    t.logprobs = {-0.5f, -1.5f};
    t.versions.assign(2, static_cast<int32_t>(version));
    t.reward = i;
    t.sample_index = i;
    t.finish_reason = i == 0 ? "stop" : "length";
    g.trajectories.push_back(t);
  }
  return g;
}

// Counts its steps; remembers the batches it was given.
class FakePolicy final : public PolicyStepper {
 public:
  explicit FakePolicy(int64_t version = 0) : version_(version) {}
  int64_t version() const override { return version_; }
  absl::StatusOr<Metrics> step(const std::vector<buffer::TrajectoryGroup>& groups) override {
    if (fail_at_ == version_) return absl::InternalError("the step failed");
    batches.push_back(groups.size());
    ++version_;
    return Metrics{{"actor/pg_loss", 0.5}};
  }
  void fail_at(int64_t version) { fail_at_ = version; }
  std::vector<size_t> batches;

 private:
  int64_t version_;
  int64_t fail_at_ = -1;
};

// Hands out a scripted answer per call (then groups generated at the asked version), and
// kStop once `stop` says so.
class ScriptedSource final : public BatchSource {
 public:
  absl::StatusOr<TrainingBatch> next(int64_t version, const StopRequested& stop) override {
    asked.push_back(version);
    TrainingBatch b;
    if (stop && stop()) {
      b.kind = TrainingBatch::Kind::kStop;
      return b;
    }
    if (!script.empty()) {
      b = std::move(script.front());
      script.erase(script.begin());
      return b;
    }
    b.kind = TrainingBatch::Kind::kGroups;
    b.groups = {group_at(version - lag)};
    return b;
  }
  std::vector<TrainingBatch> script;
  std::vector<int64_t> asked;
  int64_t lag = 0;  // groups generated this many versions before the asked one
};

TrainingBatch of_kind(TrainingBatch::Kind kind, const std::string& why = "") {
  TrainingBatch b;
  b.kind = kind;
  b.why = why;
  return b;
}

// Hooks that record what they were called with.
struct Recorder {
  std::vector<int64_t> published, evaluated, saved, stepped;
  std::vector<int64_t> saved_violations;
  std::map<std::string, std::map<int64_t, double>> logged;

  RlLoopHooks hooks() {
    RlLoopHooks h;
    h.publish = [this](int64_t v) {
      published.push_back(v);
      return absl::OkStatus();
    };
    h.evaluate = [this](int64_t s) {
      evaluated.push_back(s);
      return absl::OkStatus();
    };
    h.save = [this](int64_t s, int64_t violations) {
      saved.push_back(s);
      saved_violations.push_back(violations);
      return absl::OkStatus();
    };
    h.log = [this](const std::string& name, double value, int64_t step) {
      logged[name][step] = value;
    };
    h.stepped = [this](int64_t s) { stepped.push_back(s); };
    return h;
  }
};

TEST(RlLoopTest, TrainsToTotalStepsWithEveryCadence) {
  RlLoopOptions o;
  o.total_steps = 5;
  o.publish_every_steps = 2;
  o.eval_every_steps = 2;
  o.checkpoint_every_steps = 2;
  FakePolicy policy;
  ScriptedSource source;
  Recorder r;
  RlLoop loop(o, &policy, r.hooks());
  absl::StatusOr<RlLoopResult> result = loop.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->first_step, 0);
  EXPECT_EQ(result->last_step, 5);
  EXPECT_EQ(result->stopped_by, "");
  EXPECT_THAT(source.asked, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(policy.batches, ElementsAre(1, 1, 1, 1, 1));
  EXPECT_THAT(r.published, ElementsAre(2, 4, 5));     // every 2 and the last
  EXPECT_THAT(r.evaluated, ElementsAre(0, 2, 4, 5));  // start, every 2 but the last, end
  EXPECT_THAT(r.saved, ElementsAre(2, 4, 5));         // every 2 and the end
  EXPECT_THAT(r.stepped, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(r.logged["actor/pg_loss"].size(), 5u);
  EXPECT_DOUBLE_EQ(r.logged["response_length/max"][3], 2.0);
  EXPECT_DOUBLE_EQ(r.logged["response_length/clip_ratio"][3], 0.5);  // one of two "length"
  EXPECT_DOUBLE_EQ(r.logged["async/staleness_max"][3], 0.0);
}

TEST(RlLoopTest, AStopEndsTheLoopAndSavesTheLastStep) {
  RlLoopOptions o;
  o.total_steps = 100;
  FakePolicy policy;
  ScriptedSource source;
  Recorder r;
  RlLoop loop(o, &policy, r.hooks());
  absl::StatusOr<RlLoopResult> result =
      loop.run(source, [&policy] { return policy.version() >= 3; });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->last_step, 3);
  EXPECT_EQ(result->stopped_by, "a stop request");
  EXPECT_THAT(r.saved, ElementsAre(3));
  EXPECT_THAT(r.evaluated, ElementsAre(0, 3));
}

TEST(RlLoopTest, TheEndOfTheDataEndsTheLoop) {
  RlLoopOptions o;
  o.total_steps = 10;
  FakePolicy policy;
  ScriptedSource source;
  source.script.push_back(of_kind(TrainingBatch::Kind::kWait));
  source.script.push_back(of_kind(TrainingBatch::Kind::kWait));
  source.script.push_back(of_kind(TrainingBatch::Kind::kExhausted));
  Recorder r;
  RlLoop loop(o, &policy, r.hooks());
  absl::StatusOr<RlLoopResult> result = loop.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stopped_by, "the end of the dataset (data.epochs)");
  EXPECT_THAT(source.asked, ElementsAre(0, 0, 0));  // kWait: asked again at the same version
  EXPECT_EQ(result->last_step, 0);
  EXPECT_THAT(r.evaluated, ElementsAre(0));  // no step taken: no second evaluation
  EXPECT_THAT(r.saved, ElementsAre(0));
}

TEST(RlLoopTest, NoProgressIsADeadlineError) {
  RlLoopOptions o;
  o.total_steps = 10;
  FakePolicy policy;
  ScriptedSource source;
  source.script.push_back(of_kind(TrainingBatch::Kind::kGroups));
  source.script.back().groups = {group_at(0)};
  source.script.push_back(of_kind(TrainingBatch::Kind::kNoProgress, "no group for 60 s"));
  RlLoop loop(o, &policy, {});
  absl::StatusOr<RlLoopResult> result = loop.run(source, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.status().message(), HasSubstr("no group for 60 s"));
  EXPECT_EQ(policy.version(), 1);
}

TEST(RlLoopTest, AResumedRunStartsAtItsVersionAndDoesNotSaveItAgain) {
  RlLoopOptions o;
  o.total_steps = 5;
  o.saved_step = 5;
  FakePolicy done(5);  // resumed from the last step: nothing left to train
  ScriptedSource source;
  Recorder r;
  RlLoop finished(o, &done, r.hooks());
  absl::StatusOr<RlLoopResult> result = finished.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(source.asked.empty());
  EXPECT_TRUE(r.saved.empty());
  EXPECT_THAT(r.evaluated, ElementsAre(5));

  o.saved_step = 3;
  FakePolicy policy(3);
  Recorder r2;
  RlLoop resumed(o, &policy, r2.hooks());
  result = resumed.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->first_step, 3);
  EXPECT_THAT(source.asked, ElementsAre(3, 4));
  EXPECT_THAT(r2.saved, ElementsAre(5));
  EXPECT_THAT(r2.evaluated, ElementsAre(3, 5));
}

TEST(RlLoopTest, CountsTrajectoriesTrainedBeyondMaxStalenessOverTheWholeRun) {
  RlLoopOptions o;
  o.total_steps = 4;
  o.max_staleness = 1;
  o.violations = 7;  // from before the resume
  FakePolicy policy;
  ScriptedSource source;
  source.lag = 2;  // every trajectory is two versions old: both of each group violate
  Recorder r;
  RlLoop loop(o, &policy, r.hooks());
  absl::StatusOr<RlLoopResult> result = loop.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->violations, 7 + 4 * 2);
  EXPECT_THAT(r.saved_violations, ElementsAre(15));
  EXPECT_DOUBLE_EQ(r.logged["async/staleness_max"][2], 2.0);
  EXPECT_DOUBLE_EQ(r.logged["async/staleness_mean"][2], 2.0);
  EXPECT_DOUBLE_EQ(r.logged["async/staleness_violations"][1], 9.0);
  EXPECT_DOUBLE_EQ(r.logged["async/staleness_violations"][4], 15.0);

  source.lag = 1;  // at the bound: no violation
  FakePolicy fresh;
  RlLoopOptions bounded = o;
  bounded.violations = 0;
  RlLoop within(bounded, &fresh, {});
  result = within.run(source, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->violations, 0);
}

// Reward parts are averaged over the batch, except a judge's call time ("<label>/latency_s"),
// which is reported as its median and 99th percentile.
TEST(BatchStatsTest, RewardPartsAreMeansAndLatenciesQuantiles) {
  buffer::TrajectoryGroup g = group_at(0);
  buffer::TrajectoryGroup h = group_at(0, "h");
  const std::vector<double> latencies = {0.4, 0.1, 0.3, 0.2};
  for (int i = 0; i < 4; ++i) {
    buffer::Trajectory& t = (i < 2 ? g : h).trajectories[i % 2];
    t.reward_breakdown["judge"] = i;
    t.reward_breakdown["judge/latency_s"] = latencies[i];
  }
  const BatchStats s = batch_stats({g, h}, 0, 1);
  EXPECT_DOUBLE_EQ(s.reward_parts.at("judge"), 1.5);
  EXPECT_DOUBLE_EQ(s.reward_parts.at("judge/latency_p50"), 0.2);
  EXPECT_DOUBLE_EQ(s.reward_parts.at("judge/latency_p99"), 0.4);
  EXPECT_EQ(s.reward_parts.count("judge/latency_s"), 0u);
}

// Issue 28: a batch of episodes logs episode/*; single-turn batches log none of them.
TEST(BatchStatsTest, EpisodesHaveTheirMetrics) {
  EXPECT_TRUE(batch_stats({group_at(0)}, 0, 1).episode.empty());
  buffer::TrajectoryGroup g = group_at(0);
  g.env_errors = 3;
  // Trajectory 0: two turns (one a tool call), 1 model + 1 environment token, stopped.
  g.trajectories[0].loss_mask = {1, 0};
  g.trajectories[0].turn_ends = {1, 2};
  g.trajectories[0].turn_rewards = {0, 0};
  g.trajectories[0].tool_calls = 1;
  g.trajectories[0].env_step_seconds = {0.1f, 0.3f};
  // Trajectory 1: one turn, out of tokens ("length").
  g.trajectories[1].turn_ends = {2};
  g.trajectories[1].turn_rewards = {0};
  g.trajectories[1].env_step_seconds = {0.2f};
  const std::map<std::string, double> e = batch_stats({g}, 0, 1).episode;
  EXPECT_DOUBLE_EQ(e.at("episode/turns/mean"), 1.5);
  EXPECT_DOUBLE_EQ(e.at("episode/segments/mean"), 1.0);
  EXPECT_DOUBLE_EQ(e.at("episode/tool_calls/mean"), 0.5);
  EXPECT_DOUBLE_EQ(e.at("episode/model_tokens/mean"), 1.5);
  EXPECT_DOUBLE_EQ(e.at("episode/env_tokens/mean"), 0.5);
  EXPECT_DOUBLE_EQ(e.at("episode/truncated"), 0.5);
  EXPECT_DOUBLE_EQ(e.at("episode/env_errors"), 3);
  EXPECT_NEAR(e.at("episode/step_latency_p50"), 0.2, 1e-6);
  EXPECT_NEAR(e.at("episode/step_latency_p99"), 0.3, 1e-6);
}

// Issue 29: an agent episode cut into segments (a rewritten history) is one episode: its
// segments' turns add up, and only its last segment says whether it was truncated.
TEST(BatchStatsTest, AnEpisodeOfSeveralSegmentsCountsOnce) {
  buffer::TrajectoryGroup g = group_at(0);  // [0]: "stop", [1]: "length"
  g.trajectories.insert(g.trajectories.begin() + 1, g.trajectories[1]);
  for (buffer::Trajectory& t : g.trajectories) {
    t.turn_ends = {1, 2};
    t.turn_rewards = {0, 0};
  }
  // Episode 0: segments 0 ("stop") and 1 ("length"); episode 1: one segment, "length".
  g.trajectories[0].finish_reason = "length";
  g.trajectories[1].finish_reason = "stop";
  g.trajectories[1].segment = 1;
  g.trajectories[1].sample_index = 0;
  g.trajectories[1].turn_ends = {2};
  g.trajectories[1].turn_rewards = {0};
  const std::map<std::string, double> e = batch_stats({g}, 0, 1).episode;
  EXPECT_DOUBLE_EQ(e.at("episode/segments/mean"), 1.5);
  EXPECT_DOUBLE_EQ(e.at("episode/turns/mean"), 2.5);  // (2 + 1) and 2
  EXPECT_DOUBLE_EQ(e.at("episode/truncated"), 0.5);   // episode 0 ended "stop"
}

TEST(RlLoopTest, ErrorsOfTheStepAndTheHooksEndTheLoop) {
  RlLoopOptions o;
  o.total_steps = 5;
  FakePolicy policy;
  policy.fail_at(2);
  ScriptedSource source;
  RlLoop loop(o, &policy, {});
  EXPECT_EQ(loop.run(source, nullptr).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(policy.version(), 2);

  FakePolicy other;
  RlLoopHooks hooks;
  hooks.publish = [](int64_t v) {
    return v == 3 ? absl::UnavailableError("store full") : absl::OkStatus();
  };
  RlLoop publishing(o, &other, hooks);
  absl::StatusOr<RlLoopResult> r = publishing.run(source, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(other.version(), 3);
}

// --- rank 0's source over the controller's core.

buffer::ControllerOptions controller_options(int64_t groups_per_step) {
  buffer::ControllerOptions o;
  o.num_prompts = 8;
  o.groups_per_step = groups_per_step;
  o.max_staleness = 1;
  o.limits.vocab_size = 100;
  o.limits.group_size = 2;
  o.worker_timeout_s = 1000;
  return o;
}

// Pushes `n` groups for leases granted to worker "w" at the core's version.
void push_groups(buffer::ControllerCore& core, int64_t n, int64_t version) {
  buffer::Grant g = core.acquire("w", n, buffer::monotonic_seconds());
  ASSERT_EQ(g.kind, buffer::Grant::Kind::kWork);
  for (const buffer::Lease& lease : g.leases) {
    buffer::TrajectoryGroup group = group_at(version, "g" + std::to_string(lease.id));
    group.lease_id = lease.id;
    group.worker_id = "w";
    ASSERT_TRUE(core.push(std::move(group), buffer::monotonic_seconds()).ok());
  }
}

TEST(ControllerBatchSourceTest, TakesBatchesLogsTheirPromptsAndClosesAtTheLastStep) {
  auto core = std::move(*buffer::ControllerCore::create(controller_options(2), nullptr));
  ControllerBatchOptions o;
  o.groups_per_step = 2;
  o.total_steps = 2;
  o.wait_answer_s = 0.05;
  flywheel::testing::ScratchDir scratch("rl_loop_test");
  o.prompts_log = scratch.sub("prompts.jsonl");
  ControllerBatchSource source(o, core.get());

  absl::StatusOr<TrainingBatch> b = source.next(0, nullptr);  // nothing pushed yet
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kind, TrainingBatch::Kind::kWait);
  push_groups(*core, 2, 0);
  b = source.next(0, nullptr);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->kind, TrainingBatch::Kind::kGroups);
  EXPECT_EQ(b->groups.size(), 2u);
  EXPECT_FALSE(core->closed());
  core->set_version(1);
  push_groups(*core, 2, 1);
  b = source.next(1, nullptr);
  ASSERT_EQ(b->kind, TrainingBatch::Kind::kGroups);
  EXPECT_TRUE(core->closed());  // the last step's batch: nothing more is granted

  absl::StatusOr<std::string> log = core::read_file(o.prompts_log);
  ASSERT_TRUE(log.ok());
  EXPECT_THAT(*log, HasSubstr("{\"step\": 1, \"prompts\": [[0, "));
  EXPECT_THAT(*log, HasSubstr("{\"step\": 2, \"prompts\": [[0, "));
  // A resume at step 1 keeps step 1's line only (and drops a torn last line).
  std::ofstream(o.prompts_log, std::ios::app) << "{\"step\": 3, \"pro";
  ASSERT_TRUE(ControllerBatchSource::truncate_prompts_log(o.prompts_log, 1).ok());
  log = core::read_file(o.prompts_log);
  EXPECT_THAT(*log, HasSubstr("\"step\": 1"));
  EXPECT_THAT(*log, ::testing::Not(HasSubstr("\"step\": 2")));
  EXPECT_THAT(*log, ::testing::Not(HasSubstr("\"step\": 3")));
}

TEST(ControllerBatchSourceTest, AnswersStopExhaustedAndNoProgress) {
  auto core = std::move(*buffer::ControllerCore::create(controller_options(2), nullptr));
  ControllerBatchOptions o;
  o.groups_per_step = 2;
  o.total_steps = 10;
  o.wait_answer_s = 5;
  o.no_progress_timeout_s = 0.05;
  o.workers_logs = "/run/logs";
  ControllerBatchSource source(o, core.get());
  EXPECT_EQ(source.next(0, [] { return true; })->kind, TrainingBatch::Kind::kStop);

  absl::StatusOr<TrainingBatch> b = source.next(0, nullptr);  // no worker ever pushes
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->kind, TrainingBatch::Kind::kNoProgress);
  EXPECT_THAT(b->why, HasSubstr("0 of 2 groups buffered"));
  EXPECT_THAT(b->why, HasSubstr("/run/logs"));

  // One epoch of 8 prompts, all pushed and taken: then the data is exhausted.
  for (int64_t v = 0; v < 4; ++v) {
    push_groups(*core, 2, v);
    b = source.next(v, nullptr);
    ASSERT_EQ(b->kind, TrainingBatch::Kind::kGroups) << v;
    core->set_version(v + 1);
  }
  EXPECT_EQ(source.next(4, nullptr)->kind, TrainingBatch::Kind::kExhausted);
  // Settled once every live worker heard that training is over.
  EXPECT_FALSE(source.settle(0.05));
  EXPECT_EQ(core->acquire("w", 1, buffer::monotonic_seconds()).kind, buffer::Grant::Kind::kDone);
  EXPECT_TRUE(source.settle(1.0));
}

}  // namespace
}  // namespace flywheel::trainer
