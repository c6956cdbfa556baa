#include "flywheel/buffer/controller_core.h"

#include <map>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::buffer {
namespace {

using ::testing::HasSubstr;

ControllerOptions options(int64_t prompts, int64_t groups_per_step, int64_t max_staleness) {
  ControllerOptions o;
  o.num_prompts = prompts;
  o.groups_per_step = groups_per_step;
  o.max_staleness = max_staleness;
  o.limits.vocab_size = 100;
  o.limits.group_size = 2;
  o.lease_timeout_s = 10;
  o.worker_timeout_s = 1000;
  return o;
}

std::unique_ptr<ControllerCore> make(const ControllerOptions& o,
                                     ControllerCore::Filter filter = nullptr) {
  auto c = ControllerCore::create(o, std::move(filter));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// A valid group for `lease`, every token produced at `version`, rewards r0 / r1.
TrajectoryGroup group_for(const Lease& lease, int64_t version, double r0 = 1, double r1 = 0) {
  TrajectoryGroup g;
  g.group_id = "g" + std::to_string(lease.id);
  g.lease_id = lease.id;
  g.worker_id = lease.worker;
  for (int i = 0; i < 2; ++i) {
    Trajectory t;
    t.prompt_ids = {1, 2, 3};
    t.response_ids = {4, 5};
    t.loss_mask = {1, 1};
    t.logprobs = {-0.5f, -1.5f};
    t.versions.assign(2, static_cast<int32_t>(version));
    t.reward = i == 0 ? r0 : r1;
    t.sample_index = i;
    g.trajectories.push_back(t);
  }
  return g;
}

TEST(ControllerCoreTest, StalenessBudgetGatesGrantsAndZeroIsSynchronous) {
  auto c = make(options(/*prompts=*/20, /*groups_per_step=*/2, /*max_staleness=*/0));
  Grant g = c->acquire("w", 10, 0);
  ASSERT_EQ(g.kind, Grant::Kind::kWork);
  ASSERT_EQ(g.leases.size(), 2u);  // (0 + 0 + 1) * 2
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kWait);
  for (const Lease& l : g.leases) ASSERT_TRUE(c->push(group_for(l, 0), 0).ok());
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kWait);  // buffered still counts
  ASSERT_TRUE(c->take_batch(2).ok());
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kWait);  // consumed counts until v1
  c->set_version(1);
  EXPECT_EQ(c->acquire("w", 10, 0).leases.size(), 2u);
}

// Issue 32: a buffered group's process rewards (step_ends, step_rewards) survive a snapshot.
TEST(ControllerCoreTest, StepRewardsSurviveASnapshot) {
  auto c = make(options(/*prompts=*/10, /*groups_per_step=*/1, /*max_staleness=*/1));
  Grant g = c->acquire("w", 1, 0);
  ASSERT_EQ(g.leases.size(), 1u);
  TrajectoryGroup group = group_for(g.leases[0], 0);
  group.prompt_index = g.leases[0].prompt;
  group.trajectories[0].step_ends = {1, 2};
  group.trajectories[0].step_rewards = {0.25, -0.5};
  ASSERT_TRUE(c->push(std::move(group), 0).ok());
  auto restored = ControllerCore::restore(options(10, 1, 1), c->snapshot(), 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto batch = (*restored)->take_batch(1);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 1u);
  const Trajectory& t = (*batch)[0].trajectories[0];
  EXPECT_EQ(t.step_ends, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(t.step_rewards, (std::vector<double>{0.25, -0.5}));
  EXPECT_TRUE((*batch)[0].trajectories[1].step_ends.empty());
}

// A buffered group's expert routes (mixture-of-experts models) survive a snapshot.
TEST(ControllerCoreTest, ExpertRoutesSurviveASnapshot) {
  ControllerOptions moe = options(/*prompts=*/10, /*groups_per_step=*/1, /*max_staleness=*/1);
  moe.limits.route_layers = 2;
  moe.limits.route_k = 1;
  moe.limits.num_experts = 0xFF;
  auto c = make(moe);
  Grant g = c->acquire("w", 1, 0);
  ASSERT_EQ(g.leases.size(), 1u);
  TrajectoryGroup group = group_for(g.leases[0], 0);
  group.prompt_index = g.leases[0].prompt;
  Trajectory& routed = group.trajectories[0];
  routed.route_layers = 2;
  routed.route_k = 1;
  routed.route_bytes = 1;
  routed.routes = {0, 1, 2, 3, 4, 5, 6, 7, 0xFE, 0xFF};  // (3 + 2) tokens x 2 layers x 1
  const std::vector<uint8_t> routes = routed.routes;
  ASSERT_TRUE(c->push(std::move(group), 0).ok());
  auto restored = ControllerCore::restore(moe, c->snapshot(), 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto batch = (*restored)->take_batch(1);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 1u);
  const Trajectory& t = (*batch)[0].trajectories[0];
  EXPECT_EQ(t.routes, routes);
  EXPECT_EQ(t.route_layers, 2);
  EXPECT_EQ(t.route_k, 1);
  EXPECT_EQ(t.route_bytes, 1);
  const Trajectory& dense = (*batch)[0].trajectories[1];
  EXPECT_TRUE(dense.routes.empty());
  EXPECT_EQ(dense.route_layers + dense.route_k + dense.route_bytes, 0);
}

// Issue 26, item 6: lease ids carry the controller start's incarnation, so a start restored
// from a snapshot never grants an id an earlier start granted (even after the snapshot); a push
// must come from its lease's worker and answer its lease's prompt.
TEST(ControllerCoreTest, LeaseIdsOfARestartNeverRepeatAnEarlierStartsAndPushesMatchTheirLease) {
  ControllerOptions first = options(10, 1, 5);
  first.incarnation = 3;
  auto c = make(first);
  ASSERT_TRUE(c->acquire("w", 2, 0).kind == Grant::Kind::kWork);
  const std::string snapshot = c->snapshot();
  std::set<uint64_t> granted;
  for (const Lease& l : c->acquire("w", 3, 0).leases) granted.insert(l.id);  // after the snapshot
  for (uint64_t id : granted) EXPECT_EQ(id >> 32, 3u);
  ControllerOptions second = first;
  second.incarnation = 4;
  auto restored = ControllerCore::restore(second, snapshot, 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->incarnation(), 4u);
  (*restored)->release_all();
  Grant g = (*restored)->acquire("w", 5, 1);
  ASSERT_EQ(g.leases.size(), 5u);
  for (const Lease& l : g.leases) {
    EXPECT_EQ(l.id >> 32, 4u);
    EXPECT_EQ(granted.count(l.id), 0u) << l.id;
  }
  // The same incarnation as the snapshot's leases is refused: its ids could repeat.
  EXPECT_EQ(ControllerCore::restore(first, snapshot, 1).status().code(),
            absl::StatusCode::kInvalidArgument);

  ControllerCore& core = **restored;
  TrajectoryGroup other_worker = group_for(g.leases[0], 0);
  other_worker.worker_id = "someone-else";
  absl::Status s = core.push(std::move(other_worker), 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("granted to worker 'w'"));
  TrajectoryGroup other_prompt = group_for(g.leases[1], 0);
  other_prompt.prompt_index = g.leases[2].prompt;
  EXPECT_EQ(core.push(std::move(other_prompt), 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core.counters().rejected_lease, 2);
  EXPECT_EQ(core.in_flight(), 5);  // the leases stay: the right push may still come
  TrajectoryGroup right = group_for(g.leases[1], 0);
  right.prompt_index = g.leases[1].prompt;
  EXPECT_EQ(*core.push(std::move(right), 2), PushOutcome::kAccepted);
}

// Item 7: groups overtaken by later grants (a slow worker) are not left to go stale: the
// learners take groups in grant order and, while a lease due at this version is out, wait.
TEST(ControllerCoreTest, BatchesFollowGrantOrderAndWaitForALeaseThatWouldGoStale) {
  auto c = make(options(/*prompts=*/50, /*groups_per_step=*/1, /*max_staleness=*/1));
  Lease slow = c->acquire("slow", 1, 0).leases.at(0);  // granted at version 0
  Lease fast = c->acquire("fast", 1, 0).leases.at(0);
  ASSERT_TRUE(c->push(group_for(fast, 0), 0).ok());
  ASSERT_TRUE(c->take_batch(1).ok());  // version 0: the slow lease may still be trained at 1
  c->set_version(1);
  Lease later = c->acquire("fast", 1, 1).leases.at(0);  // granted at version 1
  ASSERT_TRUE(c->push(group_for(later, 1), 1).ok());
  // Taking `later` now would train `slow` at version 2 at the earliest: stale.
  absl::Status waiting = c->take_batch(1).status();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(waiting.message()), HasSubstr("granted at version 0"));
  ASSERT_TRUE(c->push(group_for(slow, 0), 2).ok());
  std::vector<PromptRef> prompts;
  auto batch = c->take_batch(1, &prompts);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(prompts.at(0).prompt, slow.prompt);  // the older grant first
  EXPECT_EQ(c->counters().stale_dropped, 0);
  // A lease that expires (its worker died) holds the learners only until it expires.
  auto d = make(options(/*prompts=*/50, /*groups_per_step=*/2, /*max_staleness=*/0));
  ASSERT_EQ(d->acquire("gone", 1, 0).leases.size(), 1u);
  Lease other = d->acquire("fast", 1, 0).leases.at(0);
  ASSERT_TRUE(d->push(group_for(other, 0), 0).ok());
  EXPECT_EQ(d->take_batch(1).status().code(), absl::StatusCode::kUnavailable);
  d->heartbeat("fast", 11);
  d->expire(/*now=*/11);  // lease_timeout 10
  EXPECT_EQ(d->counters().expired, 1);
  auto taken = d->take_batch(1, &prompts);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(prompts.back().prompt, other.prompt);
}

// Item 7: grants are made at the newest published weights' version when the learners are
// ahead of them (weight_sync.every_steps > 1).
TEST(ControllerCoreTest, GrantsAreMadeAtTheNewestPublishedWeights) {
  auto c = make(options(/*prompts=*/50, /*groups_per_step=*/2, /*max_staleness=*/1));
  c->set_version(4);
  EXPECT_EQ(c->acquire("w", 1, 0).version, 4);
  c->set_weights_version(2);
  Grant g = c->acquire("w", 50, 0);
  EXPECT_EQ(g.version, 2);
  EXPECT_EQ(c->budget_limit(), (1 + 2 + 1) * 2);
  EXPECT_EQ(g.leases.size() + 1, 8u);  // the budget at version 2, less the lease held
}

// Item 9: no prompt is granted beyond the groups the run trains; once they are taken, and
// after close(), workers hear "done" (also in heartbeats) and the controller is settled once
// every live worker heard it and no lease is out.
TEST(ControllerCoreTest, GrantsStopAtTheRunsGroupsAndEveryLiveWorkerHearsDone) {
  ControllerOptions o = options(/*prompts=*/50, /*groups_per_step=*/2, /*max_staleness=*/5);
  o.max_groups = 3;
  o.worker_timeout_s = 10;
  auto c = make(o);
  Grant g = c->acquire("a", 10, 0);
  ASSERT_EQ(g.leases.size(), 3u);
  EXPECT_EQ(c->acquire("b", 10, 0).kind, Grant::Kind::kWait);
  for (const Lease& l : g.leases) ASSERT_TRUE(c->push(group_for(l, 0), 0).ok());
  ASSERT_TRUE(c->take_batch(3).ok());
  EXPECT_EQ(c->acquire("a", 10, 1).kind, Grant::Kind::kDone);
  c->close();
  EXPECT_FALSE(c->settled(1));  // "b" was heard and not told
  EXPECT_TRUE(c->heartbeat_done("b", 2));
  EXPECT_TRUE(c->settled(2));  // "a" heard kDone already
  c->heartbeat("late", 4);     // a worker that appears later must hear it too
  EXPECT_FALSE(c->settled(4));
  EXPECT_TRUE(c->settled(15));  // ... unless it went silent
}

TEST(ControllerCoreTest, MaxStalenessOneAllowsOneStepAhead) {
  auto c = make(options(20, 2, 1));
  EXPECT_EQ(c->acquire("w", 10, 0).leases.size(), 4u);  // (1 + 0 + 1) * 2
  EXPECT_EQ(c->budget_limit(), 4);
}

TEST(ControllerCoreTest, ExpiredLeasesAreReissuedAndLatePushesRejected) {
  auto c = make(options(5, 1, 0));
  Lease first = c->acquire("a", 1, /*now=*/0).leases.at(0);
  c->expire(/*now=*/11);  // lease_timeout 10
  EXPECT_EQ(c->in_flight(), 0);
  Lease again = c->acquire("b", 1, 12).leases.at(0);
  EXPECT_EQ(again.prompt, first.prompt);
  EXPECT_EQ(again.epoch, first.epoch);
  EXPECT_NE(again.id, first.id);
  absl::Status late = c->push(group_for(first, 0), 13).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->counters().expired, 1);
  EXPECT_EQ(c->counters().rejected_lease, 1);
  EXPECT_EQ(*c->push(group_for(again, 0), 13), PushOutcome::kAccepted);
}

TEST(ControllerCoreTest, SilentWorkersLoseTheirLeases) {
  ControllerOptions o = options(5, 1, 0);
  o.worker_timeout_s = 3;
  auto c = make(o);
  c->acquire("quiet", 1, 0);
  c->heartbeat("quiet", 2);
  c->expire(4);
  EXPECT_EQ(c->in_flight(), 1);
  c->expire(6);
  EXPECT_EQ(c->in_flight(), 0);
  EXPECT_EQ(c->counters().expired, 1);
  // The learners' no-progress error says who went quiet, and when.
  c->heartbeat("busy", 5.5);
  EXPECT_EQ(c->workers_heard(6), "workers last heard from: busy 0.5 s ago, quiet 4.0 s ago");
  EXPECT_EQ(make(o)->workers_heard(0), "no rollout worker has registered");
}

// A worker killed and restarted within worker_timeout_s heartbeats under the same id; without
// register_worker the leases of its previous run would stay alive and the learners, waiting
// for their groups (take_batch's staleness promise), would wait forever (a CI failure of
// integration.faults).
TEST(ControllerCoreTest, ARestartedWorkerGivesBackTheLeasesOfItsPreviousRun) {
  ControllerOptions o = options(/*prompts=*/6, /*groups_per_step=*/1, /*max_staleness=*/1);
  o.worker_timeout_s = 3;
  auto c = make(o);
  const Grant first = c->acquire("w1", 2, 0);
  ASSERT_EQ(first.leases.size(), 2u);
  ASSERT_EQ(c->acquire("w2", 1, 0).leases.size(), 0u);  // the budget is spent: (1 + 0 + 1) * 1
  EXPECT_EQ(c->register_worker("w2", 0.5), 0);          // holds nothing
  EXPECT_EQ(c->register_worker("w1", 0.5), 2);
  EXPECT_EQ(c->in_flight(), 0);
  EXPECT_EQ(c->counters().expired, 2);
  // A push under a lease of the previous run is refused; its prompts are granted again, first.
  EXPECT_FALSE(c->push(group_for(first.leases[0], 0), 0.6).ok());
  const Grant again = c->acquire("w1", 2, 0.6);
  ASSERT_EQ(again.leases.size(), 2u);
  EXPECT_EQ(again.leases[0].prompt, first.leases[0].prompt);
  EXPECT_EQ(again.leases[1].prompt, first.leases[1].prompt);
  c->expire(2);  // heard at 0.6: the new leases live
  EXPECT_EQ(c->in_flight(), 2);
}

TEST(ControllerCoreTest, DroppedPromptsAreNotReissuedAndTheEpochStillDrains) {
  auto c = make(options(/*prompts=*/2, /*groups_per_step=*/1, /*max_staleness=*/5));
  Grant g = c->acquire("w", 2, 0);
  ASSERT_EQ(g.leases.size(), 2u);
  ASSERT_TRUE(c->release(g.leases[0].id, /*drop=*/true).ok());  // cannot be generated
  ASSERT_TRUE(c->release(g.leases[1].id).ok());                 // given back: re-issued
  EXPECT_EQ(c->counters().dropped, 1);
  EXPECT_EQ(c->counters().released, 1);
  Grant again = c->acquire("w", 2, 1);
  ASSERT_EQ(again.leases.size(), 1u);
  EXPECT_EQ(again.leases[0].prompt, g.leases[1].prompt);
  EXPECT_FALSE(c->drained());
  ASSERT_TRUE(c->push(group_for(again.leases[0], 0), 1).ok());
  EXPECT_TRUE(c->drained());  // the dropped prompt is not waited for
  EXPECT_EQ(c->acquire("w", 2, 2).kind, Grant::Kind::kDone);
  // A snapshot keeps the count; one written before the counter existed restores with 0.
  auto restored = ControllerCore::restore(options(2, 1, 5), c->snapshot(), 3);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->counters().dropped, 1);
}

// A sample so far: `n` tokens of `version`, unfinished.
PartialSample partial_sample(int n, int32_t version) {
  PartialSample s;
  s.token_ids.assign(n, 7);
  s.logprobs.assign(n, -0.25f);
  s.versions.assign(n, version);
  return s;
}

// Issue 30, preemption: a lease given back with its samples so far re-issues its prompt with
// them (counted), and the next grant of that prompt carries them; a partial older than
// max_staleness versions at that grant is generated afresh instead (counted); the partials
// survive a snapshot and restore.
TEST(ControllerCoreTest, ALeaseGivenBackWithItsSamplesIsReissuedWithThem) {
  auto c = make(options(/*prompts=*/10, /*groups_per_step=*/1, /*max_staleness=*/1));
  Grant g = c->acquire("w", 2, 0);
  ASSERT_EQ(g.leases.size(), 2u);
  PartialSample done = partial_sample(3, 0);
  done.finished = true;
  done.finish_reason = "stop";
  ASSERT_TRUE(c->release(g.leases[0].id, false, {partial_sample(2, 0), done}).ok());
  std::string snapshot = c->snapshot();
  auto restored = ControllerCore::restore(options(10, 1, 1), snapshot, 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (ControllerCore* core : {c.get(), restored->get()}) {
    Grant again = core->acquire("v", 1, 1);
    ASSERT_EQ(again.leases.size(), 1u);
    EXPECT_EQ(again.leases[0].prompt, g.leases[0].prompt);  // re-issued first
    ASSERT_NE(again.leases[0].partial, nullptr);
    ASSERT_EQ(again.leases[0].partial->size(), 2u);
    EXPECT_EQ((*again.leases[0].partial)[0].token_ids.size(), 2u);
    EXPECT_TRUE((*again.leases[0].partial)[1].finished);
    EXPECT_EQ((*again.leases[0].partial)[1].finish_reason, "stop");
    const ControllerCounters k = core->counters();
    EXPECT_EQ(k.partials_returned, 1);
    EXPECT_EQ(k.partials_resumed, 1);
    EXPECT_EQ(k.resumed_tokens, 5);
  }

  // Handed back at version 0, re-issued at version 2 > 0 + max_staleness: generated afresh.
  ASSERT_TRUE(c->release(g.leases[1].id, false, {partial_sample(2, 0), partial_sample(1, 0)}).ok());
  c->set_version(2);
  Grant late = c->acquire("v", 1, 2);
  ASSERT_EQ(late.leases.size(), 1u);
  EXPECT_EQ(late.leases[0].prompt, g.leases[1].prompt);
  EXPECT_EQ(late.leases[0].partial, nullptr);
  EXPECT_EQ(c->counters().partials_discarded, 1);

  // An invalid partial is refused, naming the field; the lease is released all the same.
  Grant more = c->acquire("w", 1, 2);
  ASSERT_EQ(more.leases.size(), 1u);
  PartialSample bad = partial_sample(2, 3);  // version 3 > the learner's 2
  absl::Status s = c->release(more.leases[0].id, false, {partial_sample(1, 2), bad});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("partial[1].versions[0]: version 3"));
  EXPECT_EQ(c->release(more.leases[0].id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->counters().partials_returned, 2);
}

TEST(ControllerCoreTest, ClosedControllerSaysDoneAndReleaseAllReissues) {
  auto c = make(options(10, 2, 1));
  Grant g = c->acquire("w", 3, 0);
  ASSERT_EQ(g.leases.size(), 3u);
  EXPECT_EQ(c->release_all(), 3);
  EXPECT_EQ(c->in_flight(), 0);
  Grant again = c->acquire("v", 3, 1);
  ASSERT_EQ(again.leases.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again.leases[i].prompt, g.leases[i].prompt);
  c->close();
  EXPECT_EQ(c->acquire("v", 3, 2).kind, Grant::Kind::kDone);
}

TEST(ControllerCoreTest, DuplicatePushesAreAcknowledgedOnce) {
  auto c = make(options(5, 2, 0));
  Lease l = c->acquire("w", 1, 0).leases.at(0);
  EXPECT_EQ(*c->push(group_for(l, 0), 0), PushOutcome::kAccepted);
  EXPECT_EQ(*c->push(group_for(l, 0), 1), PushOutcome::kDuplicate);
  EXPECT_EQ(c->buffered(), 1);
  EXPECT_EQ(c->counters().duplicates, 1);
}

// Only the most recent acknowledged ids are remembered; an older id pushed again finds its lease
// gone, so it is rejected rather than stored twice. Snapshots keep what is remembered.
TEST(ControllerCoreTest, RememberedIdsAreBoundedAndForgottenOnesAreNeverStoredTwice) {
  ControllerOptions o = options(6, 4, 0);
  o.remembered_group_ids = 2;
  auto c = make(o);
  Grant g = c->acquire("w", 3, 0);
  ASSERT_EQ(g.leases.size(), 3u);
  for (const Lease& l : g.leases) ASSERT_EQ(*c->push(group_for(l, 0), 0), PushOutcome::kAccepted);
  absl::Status forgotten = c->push(group_for(g.leases[0], 0), 1).status();
  EXPECT_EQ(forgotten.code(), absl::StatusCode::kFailedPrecondition) << forgotten;
  EXPECT_EQ(*c->push(group_for(g.leases[1], 0), 1), PushOutcome::kDuplicate);
  EXPECT_EQ(*c->push(group_for(g.leases[2], 0), 1), PushOutcome::kDuplicate);
  EXPECT_EQ(c->buffered(), 3);

  auto restored = ControllerCore::restore(o, c->snapshot(), 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*(*restored)->push(group_for(g.leases[2], 0), 2), PushOutcome::kDuplicate);
  EXPECT_EQ((*restored)->push(group_for(g.leases[0], 0), 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ControllerCoreTest, FilterDropsGroupsWithoutSignalAndCountsThem) {
  auto c = make(options(5, 2, 0), [](const std::vector<double>& r) { return r[0] != r[1]; });
  Grant g = c->acquire("w", 2, 0);
  EXPECT_EQ(*c->push(group_for(g.leases[0], 0, 1, 1), 0), PushOutcome::kFiltered);
  EXPECT_EQ(*c->push(group_for(g.leases[1], 0, 1, 0), 0), PushOutcome::kAccepted);
  EXPECT_EQ(c->counters().filtered, 1);
  EXPECT_EQ(c->buffered(), 1);
  EXPECT_EQ(c->acquire("w", 5, 0).leases.size(), 1u);  // the filtered prompt freed budget
}

// buffer.filter_metric: the filter sees one reward function's score (DAPO's dynamic sampling on
// accuracy while another reward shapes the advantages); a group without it is invalid and its
// lease stays.
TEST(ControllerCoreTest, FilterSeesARewardBreakdownEntry) {
  ControllerOptions o = options(5, 3, 0);
  o.filter_metric = "exact_match";
  auto c = make(o, [](const std::vector<double>& r) { return r[0] != r[1]; });
  Grant g = c->acquire("w", 3, 0);
  ASSERT_EQ(g.leases.size(), 3u);
  auto with_accuracy = [&](const Lease& lease, double a0, double a1) {
    TrajectoryGroup group = group_for(lease, 0, 0.9, 0.1);  // totals differ
    group.trajectories[0].reward_breakdown = {{"exact_match", a0}, {"prm", 0.9}};
    group.trajectories[1].reward_breakdown = {{"exact_match", a1}, {"prm", 0.1}};
    return group;
  };
  EXPECT_EQ(*c->push(with_accuracy(g.leases[0], 1, 1), 0), PushOutcome::kFiltered);
  EXPECT_EQ(*c->push(with_accuracy(g.leases[1], 1, 0), 0), PushOutcome::kAccepted);
  TrajectoryGroup lacking = group_for(g.leases[2], 0, 0.9, 0.1);
  const absl::Status status = c->push(std::move(lacking), 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("trajectories[0].reward_breakdown: has no 'exact_match'"));
  EXPECT_EQ(c->counters().filtered, 1);
  EXPECT_EQ(c->counters().rejected_invalid, 1);
  EXPECT_EQ(*c->push(with_accuracy(g.leases[2], 0, 1), 0), PushOutcome::kAccepted);  // lease kept
}

TEST(ControllerCoreTest, CapacityRefusesPushesButKeepsTheLease) {
  ControllerOptions o = options(10, 2, 1);
  o.capacity_groups = 2;
  auto c = make(o);
  Grant g = c->acquire("w", 3, 0);
  ASSERT_EQ(g.leases.size(), 3u);
  ASSERT_TRUE(c->push(group_for(g.leases[0], 0), 0).ok());
  ASSERT_TRUE(c->push(group_for(g.leases[1], 0), 0).ok());
  absl::Status full = c->push(group_for(g.leases[2], 0), 0).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c->in_flight(), 1);
  ASSERT_TRUE(c->take_batch(2).ok());
  EXPECT_EQ(*c->push(group_for(g.leases[2], 0), 1), PushOutcome::kAccepted);
  EXPECT_EQ(c->counters().rejected_full, 1);
}

TEST(ControllerCoreTest, StaleGroupsAreDroppedOrRequeuedAtPushAndOnVersionBumps) {
  for (bool requeue : {false, true}) {
    ControllerOptions o = options(10, 1, 1);
    o.requeue_stale = requeue;
    auto c = make(o);
    Grant g = c->acquire("w", 2, 0);
    ASSERT_TRUE(c->push(group_for(g.leases[0], 0), 0).ok());
    c->set_version(2);  // the buffered group (v0) is now older than 2 - 1
    EXPECT_EQ(c->buffered(), 0);
    auto outcome = c->push(group_for(g.leases[1], 0), 0);  // stale on arrival
    ASSERT_TRUE(outcome.ok());
    EXPECT_EQ(*outcome, requeue ? PushOutcome::kStaleRequeued : PushOutcome::kStaleDropped);
    ControllerCounters k = c->counters();
    EXPECT_EQ(requeue ? k.stale_requeued : k.stale_dropped, 2);
    if (requeue) {
      // Both prompts come back first.
      Grant again = c->acquire("w", 2, 1);
      ASSERT_EQ(again.leases.size(), 2u);
      EXPECT_EQ(again.leases[0].prompt, g.leases[0].prompt);
      EXPECT_EQ(again.leases[1].prompt, g.leases[1].prompt);
    }
  }
}

TEST(ControllerCoreTest, FreshestFirstSampling) {
  ControllerOptions o = options(10, 1, 5);
  o.freshest_first = true;
  auto c = make(o);
  c->set_version(3);
  Grant g = c->acquire("w", 3, 0);
  ASSERT_TRUE(c->push(group_for(g.leases[0], 1), 0).ok());
  ASSERT_TRUE(c->push(group_for(g.leases[1], 3), 0).ok());
  ASSERT_TRUE(c->push(group_for(g.leases[2], 2), 0).ok());
  auto batch = c->take_batch(3);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)[0].min_version(), 3);
  EXPECT_EQ((*batch)[1].min_version(), 2);
  EXPECT_EQ((*batch)[2].min_version(), 1);
  EXPECT_EQ(c->take_batch(1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(ControllerCoreTest, InvalidGroupsAreRejectedAndTheLeaseSurvives) {
  auto c = make(options(5, 1, 0));
  Lease l = c->acquire("w", 1, 0).leases.at(0);
  TrajectoryGroup bad = group_for(l, 0);
  bad.trajectories[1].logprobs[0] = 0.5f;
  absl::Status s = c->push(std::move(bad), 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trajectories[1].logprobs[0]"));
  EXPECT_EQ(*c->push(group_for(l, 0), 0), PushOutcome::kAccepted);
}

TEST(ControllerCoreTest, DoneAfterEveryEpochIsIssuedAndSettled) {
  ControllerOptions o = options(3, 3, 0);
  o.epochs = 2;
  auto c = make(o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    Grant g = c->acquire("w", 10, 0);
    ASSERT_EQ(g.leases.size(), 3u);
    for (const Lease& l : g.leases) {
      EXPECT_EQ(l.epoch, epoch);
      ASSERT_TRUE(c->push(group_for(l, epoch), 0).ok());
    }
    ASSERT_TRUE(c->take_batch(3).ok());
    c->set_version(epoch + 1);
  }
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kDone);
}

TEST(ControllerCoreTest, SnapshotRestoreIsEquivalent) {
  ControllerOptions o = options(7, 2, 1);
  auto a = make(o);
  Grant g = a->acquire("w", 4, 0);
  ASSERT_TRUE(a->push(group_for(g.leases[0], 0, 0.25, 0.5), 0).ok());
  TrajectoryGroup with_baseline = group_for(g.leases[1], 0);
  with_baseline.has_baseline = true;
  with_baseline.baseline_reward = 0.75;
  ASSERT_TRUE(a->push(TrajectoryGroup(with_baseline), 0).ok());
  a->expire(100);  // leases 3 and 4 expire: their prompts wait to be re-issued
  Grant g2 = a->acquire("w2", 1, 100);
  ASSERT_TRUE(a->take_batch(1).ok());
  a->set_version(1);
  auto b = ControllerCore::restore(o, a->snapshot(), /*now=*/100);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->snapshot(), a->snapshot());
  EXPECT_EQ((*b)->budget_limit(), a->budget_limit());
  EXPECT_EQ((*b)->in_flight(), a->in_flight());
  // Both continue identically.
  for (auto* c : {a.get(), b->get()}) {
    Grant next = c->acquire("w3", 10, 101);
    EXPECT_EQ(next.leases.size(), 3u);  // limit (1 + 1 + 1) * 2 = 6, 3 used
    ASSERT_TRUE(c->push(group_for(g2.leases[0], 1), 101).ok());
  }
  EXPECT_EQ((*b)->snapshot(), a->snapshot());
  auto ba = a->take_batch(2), bb = (*b)->take_batch(2);
  ASSERT_TRUE(ba.ok() && bb.ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*ba)[i].group_id, (*bb)[i].group_id);
    EXPECT_EQ((*ba)[i].trajectories[0].reward, (*bb)[i].trajectories[0].reward);
    EXPECT_EQ((*ba)[i].trajectories[1].logprobs, (*bb)[i].trajectories[1].logprobs);
    EXPECT_EQ((*bb)[i].has_baseline, (*ba)[i].group_id == with_baseline.group_id);
    EXPECT_EQ((*ba)[i].baseline_reward, (*bb)[i].baseline_reward);
  }
  EXPECT_FALSE(ControllerCore::restore(o, "{}", 0).ok());
  EXPECT_FALSE(ControllerCore::restore(o, "not json", 0).ok());
  // A snapshot of a larger dataset refers to prompts this one does not have.
  ControllerOptions smaller = o;
  smaller.num_prompts = 2;
  EXPECT_EQ(ControllerCore::restore(smaller, a->snapshot(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// With requeue_stale, a buffered group may still go stale on a version bump and send its prompt
// back: DONE only once nothing is buffered, so workers never exit before that prompt is issued.
TEST(ControllerCoreTest, DoneIsFinalWhenStaleGroupsAreRequeued) {
  ControllerOptions o = options(/*prompts=*/2, /*groups_per_step=*/2, /*max_staleness=*/1);
  o.requeue_stale = true;
  auto c = make(o);
  Grant g = c->acquire("w", 10, 0);
  ASSERT_EQ(g.leases.size(), 2u);
  for (const Lease& l : g.leases) ASSERT_TRUE(c->push(group_for(l, 0), 0).ok());
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kWait);  // was kDone
  c->set_version(2);  // both buffered groups are now too stale: their prompts come back
  Grant again = c->acquire("w", 10, 0);
  ASSERT_EQ(again.kind, Grant::Kind::kWork);
  EXPECT_EQ(again.leases.size(), 2u);
  for (const Lease& l : again.leases) ASSERT_TRUE(c->push(group_for(l, 2), 0).ok());
  ASSERT_TRUE(c->take_batch(2).ok());
  EXPECT_EQ(c->acquire("w", 10, 0).kind, Grant::Kind::kDone);
}

// A grant stops where the reply carrying it would overflow: no lease is granted for a prompt
// that is not delivered.
TEST(ControllerCoreTest, GrantsStopAtTheReplyBudget) {
  auto c = make(options(/*prompts=*/10, /*groups_per_step=*/10, /*max_staleness=*/0));
  GrantBudget budget;
  budget.cost = [](int64_t) { return int64_t{100}; };
  budget.max_cost = 350;
  Grant g = c->acquire("w", 1000, 0, &budget);
  EXPECT_EQ(g.leases.size(), 3u);
  EXPECT_EQ(c->in_flight(), 3);
  Grant rest = c->acquire("w", 1000, 0);
  EXPECT_EQ(rest.leases.size(), 7u);  // nothing was skipped
  std::set<int64_t> prompts;
  for (const Grant* grant : {&g, &rest}) {
    for (const Lease& l : grant->leases) prompts.insert(l.prompt);
  }
  EXPECT_EQ(prompts.size(), 10u);
}

// A snapshot is only restored over the dataset and group shape it was made for, and every part
// of it is checked.
TEST(ControllerCoreTest, RestoreRefusesAnotherDatasetShapeOrAMalformedSnapshot) {
  ControllerOptions o = options(/*prompts=*/10, /*groups_per_step=*/4, /*max_staleness=*/1);
  o.dataset_fingerprint = 0xABCDEF;
  auto a = make(o);
  Grant g = a->acquire("w", 3, 0);
  ASSERT_TRUE(a->push(group_for(g.leases[0], 0), 0).ok());
  const std::string snapshot = a->snapshot();
  ASSERT_TRUE(ControllerCore::restore(o, snapshot, 0).ok());
  auto refused = [&](const ControllerOptions& other, const std::string& text) {
    absl::Status s = ControllerCore::restore(other, text, 0).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  ControllerOptions more = o;
  more.num_prompts = 11;  // the case that issued 3 prompts twice and 3 never
  EXPECT_THAT(refused(more, snapshot), HasSubstr("dataset size (prompts) is 10"));
  ControllerOptions edited = o;
  edited.dataset_fingerprint = 0xABCDEE;
  EXPECT_THAT(refused(edited, snapshot), HasSubstr("dataset content fingerprint"));
  ControllerOptions reseeded = o;
  reseeded.seed = 2;
  EXPECT_THAT(refused(reseeded, snapshot), HasSubstr("data.seed"));
  ControllerOptions unshuffled = o;
  unshuffled.shuffle = false;
  EXPECT_THAT(refused(unshuffled, snapshot), HasSubstr("data.shuffle"));
  ControllerOptions bigger_groups = o;
  bigger_groups.limits.group_size = 4;
  EXPECT_THAT(refused(bigger_groups, snapshot), HasSubstr("group size is 2"));
  ControllerOptions smaller_vocab = o;
  smaller_vocab.limits.vocab_size = 50;
  EXPECT_THAT(refused(smaller_vocab, snapshot), HasSubstr("vocabulary size is 100"));
  // Buffered groups are validated again (here under a tighter token limit).
  ControllerOptions fewer_tokens = o;
  fewer_tokens.limits.max_tokens = 4;
  EXPECT_THAT(refused(fewer_tokens, snapshot), HasSubstr("buffered group 0"));
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string text = snapshot;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  EXPECT_THAT(refused(o, edit("\"requeued\":[]", "\"requeued_\":[]")), HasSubstr("arrays"));
  EXPECT_THAT(refused(o, edit("\"buffer\":[", "\"buffer_\":[")), HasSubstr("arrays"));
  EXPECT_THAT(refused(o, edit("\"next_lease_id\":4", "\"next_lease_id\":3")),
              HasSubstr("lease id 3 is outside [1, next_lease_id 3)"));
  EXPECT_THAT(refused(o, edit("\"id\":3", "\"id\":2")), HasSubstr("lease id 2 twice"));
  EXPECT_THAT(refused(o, edit("\"response_ids\":[4,5]", "\"response_ids\":[4,500]")),
              HasSubstr("response_ids[1]"));
  EXPECT_THAT(refused(o, edit("\"loss_mask\":[1,1],", "")), HasSubstr("missing"));
}

// Randomised interleavings of acquire / push / expire / sample / version bumps: the staleness
// budget and the learner-side invariant hold after every one of 10^5 operations, and no prompt
// of an epoch is ever trained twice.
TEST(ControllerCorePropertyTest, StalenessInvariantAndExactlyOnceUnderRandomInterleavings) {
  std::mt19937_64 rng(42);
  for (int64_t max_staleness : {0, 1, 3}) {
    ControllerOptions o = options(/*prompts=*/37, /*groups_per_step=*/4, max_staleness);
    o.epochs = 1000;
    o.requeue_stale = max_staleness == 1;
    o.capacity_groups = 12;
    auto c = make(o, [](const std::vector<double>& r) { return r[0] != r[1]; });
    std::map<uint64_t, std::pair<Lease, int64_t>> held;  // lease -> (lease, version at grant)
    std::set<std::pair<int64_t, int64_t>> trained;       // (epoch, prompt)
    std::map<std::string, std::pair<int64_t, int64_t>> group_prompt;
    double now = 0;
    int64_t violations = 0;
    const int kOps = 100000;
    for (int op = 0; op < kOps; ++op) {
      now += 0.01;
      switch (rng() % 6) {
        case 0: {  // acquire
          std::string worker = "w" + std::to_string(rng() % 4);
          Grant g = c->acquire(worker, 1 + rng() % 5, now);
          for (const Lease& l : g.leases) held[l.id] = {l, g.version};
          break;
        }
        case 1:
        case 2: {  // push a held lease, tokens from the grant's version up to the current one
          if (held.empty()) break;
          auto it = std::next(held.begin(), rng() % held.size());
          const auto [lease, granted_version] = it->second;
          int64_t v = granted_version + (c->version() > granted_version ? rng() % 2 : 0);
          TrajectoryGroup g = group_for(lease, v, rng() % 2, rng() % 2);
          group_prompt[g.group_id] = {lease.epoch, lease.prompt};
          auto outcome = c->push(std::move(g), now);
          if (outcome.ok() || outcome.status().code() == absl::StatusCode::kFailedPrecondition) {
            held.erase(it);
          }
          break;
        }
        case 3:  // time passes: some leases expire
          if (rng() % 50 == 0) now += 11;
          c->expire(now);
          break;
        case 4:
        case 5: {  // the learner takes a step and bumps its version
          const int64_t version = c->version();
          auto batch = c->take_batch(o.groups_per_step);
          if (!batch.ok()) break;
          for (const TrajectoryGroup& g : *batch) {
            if (g.min_version() < version - max_staleness) ++violations;
            if (!trained.insert(group_prompt.at(g.group_id)).second) ++violations;
          }
          c->set_version(version + 1);
          break;
        }
      }
      ControllerCounters k = c->counters();
      if (c->in_flight() + c->buffered() + k.consumed > c->budget_limit()) ++violations;
    }
    EXPECT_EQ(violations, 0) << "max_staleness " << max_staleness;
    EXPECT_GT(c->counters().consumed, 1000) << "the run must make progress";
    EXPECT_GT(c->counters().expired, 0);
    EXPECT_GT(c->counters().filtered, 0);
  }
}

}  // namespace
}  // namespace flywheel::buffer
