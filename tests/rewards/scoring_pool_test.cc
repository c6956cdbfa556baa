#include "flywheel/rewards/scoring_pool.h"

#include <atomic>
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"
#include "test_rewards.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

std::vector<OwnedSample> samples(const std::vector<std::string>& completions) {
  std::vector<OwnedSample> out;
  for (const std::string& c : completions) out.push_back(testing::sample("{}", c));
  return out;
}

std::unique_ptr<ScoringPool> make_pool(std::shared_ptr<const CompositeReward> reward,
                                       int64_t workers, double timeout_s,
                                       int64_t queue_size = 4096) {
  ScoringPoolOptions o;
  o.workers = workers;
  o.timeout_s = timeout_s;
  o.queue_size = queue_size;
  return std::move(*ScoringPool::create(std::move(reward), o));
}

TEST(ScoringPoolTest, ScoresEverySampleInOrderWithParts) {
  auto f = std::make_shared<testing::ScriptedReward>();
  auto reward = std::make_shared<const CompositeReward>(
      std::vector<WeightedReward>{{"len", 1.0, f}, {"len2", 0.5, f}}, 0.0);
  auto pool = make_pool(reward, 2, 10);
  std::vector<ScoredSample> out = pool->score(samples({"a", "bbb", "cc", "", "dddd"}));
  ASSERT_EQ(out.size(), 5u);
  const double lengths[] = {1, 3, 2, 0, 4};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(out[i].reward, 1.5 * lengths[i]);
    EXPECT_EQ(out[i].parts.at("len2/half"), lengths[i] / 2);
  }
  EXPECT_EQ(f->calls_.load(), 10);
  ScoringCounters c = pool->counters();
  EXPECT_EQ(c.samples, 5);
  EXPECT_EQ(c.calls, 10);
  EXPECT_EQ(c.errors + c.timeouts, 0);
}

TEST(ScoringPoolTest, AHungRewardIsTimedOutAndCountedWhileOthersKeepScoring) {
  auto f = std::make_shared<testing::ScriptedReward>(/*hang_s=*/3600);
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, -1.0);
  // One thread: the hung call holds it until the deadline; a fresh thread takes its place.
  auto pool = make_pool(reward, 1, /*timeout_s=*/0.3);
  std::vector<ScoredSample> out = pool->score(samples({"hang", "ab", "hang", "abc"}));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].reward, -1.0);
  EXPECT_EQ(out[0].timeouts, 1);
  EXPECT_THAT(out[0].errors.at(0), HasSubstr("f: timed out"));
  EXPECT_EQ(out[1].reward, 2.0);
  EXPECT_EQ(out[2].reward, -1.0);
  EXPECT_EQ(out[3].reward, 3.0);
  // Later batches still score on the replacement threads.
  std::vector<ScoredSample> more = pool->score(samples({"xy", "z"}));
  EXPECT_EQ(more[0].reward, 2.0);
  EXPECT_EQ(more[1].reward, 1.0);
  ScoringCounters c = pool->counters();
  EXPECT_EQ(c.timeouts, 2);
  EXPECT_EQ(c.abandoned_threads, 2);
  EXPECT_EQ(c.samples, 6);
}

TEST(ScoringPoolTest, ErrorsAndExceptionsScoreTheFallbackAndAreCounted) {
  auto f = std::make_shared<testing::ScriptedReward>();
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 2.0, f}}, 0.25);
  auto pool = make_pool(reward, 2, 10);
  std::vector<ScoredSample> out = pool->score(samples({"error", "throw", "ok"}));
  EXPECT_EQ(out[0].reward, 0.5);
  EXPECT_THAT(out[0].errors.at(0), HasSubstr("scripted error"));
  EXPECT_THAT(out[1].errors.at(0), HasSubstr("threw: scripted exception"));
  EXPECT_EQ(out[2].reward, 4.0);
  EXPECT_EQ(pool->counters().errors, 2);
}

TEST(ScoringPoolTest, ABatchedFunctionGetsOneCallPerBatch) {
  auto batched = std::make_shared<testing::ScriptedReward>(3600, /*batched=*/true);
  auto single = std::make_shared<testing::ScriptedReward>();
  auto reward = std::make_shared<const CompositeReward>(
      std::vector<WeightedReward>{{"b", 1.0, batched}, {"s", 1.0, single}}, 0.0);
  auto pool = make_pool(reward, 2, 10);
  std::vector<ScoredSample> out = pool->score(samples({"a", "bb", "ccc"}));
  EXPECT_EQ(out[2].reward, 6.0);
  EXPECT_EQ(batched->batch_calls_.load(), 1);
  EXPECT_EQ(single->batch_calls_.load(), 0);
  EXPECT_EQ(single->calls_.load(), 3);
}

// Blocks every call until released.
class GateReward : public RewardFunction {
 public:
  absl::StatusOr<RewardOutput> score(const RewardInput&) const override {
    started_.fetch_add(1);
    open_.wait();
    return RewardOutput{1.0, {}};
  }
  std::shared_future<void> open_;
  mutable std::atomic<int64_t> started_{0};
};

TEST(ScoringPoolTest, SubmitBlocksWhileTheQueueIsFull) {
  std::promise<void> release;
  auto gate = std::make_shared<GateReward>();
  gate->open_ = release.get_future().share();
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"g", 1.0, gate}}, 0.0);
  auto pool = make_pool(reward, 1, 60, /*queue_size=*/2);
  std::atomic<bool> submitted{false};
  std::promise<std::vector<ScoredSample>> result;
  std::thread submitter([&] {
    pool->submit(samples({"1", "2", "3", "4", "5"}),
                 [&](std::vector<ScoredSample> out) { result.set_value(std::move(out)); });
    submitted = true;
  });
  while (gate->started_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // One call running, two queued: the submitter still holds the last two.
  EXPECT_FALSE(submitted.load());
  release.set_value();
  submitter.join();
  EXPECT_TRUE(submitted.load());
  std::vector<ScoredSample> out = result.get_future().get();
  ASSERT_EQ(out.size(), 5u);
  for (const ScoredSample& s : out) EXPECT_EQ(s.reward, 1.0);
}

TEST(ScoringPoolTest, ConcurrentSubmittersEachGetTheirOwnResults) {
  auto f = std::make_shared<testing::ScriptedReward>();
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, 0.0);
  auto pool = make_pool(reward, 3, 10, /*queue_size=*/8);
  std::vector<std::thread> threads;
  std::atomic<int64_t> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        const std::string c(static_cast<size_t>(t + round % 7), 'x');
        for (const ScoredSample& s : pool->score(samples({c, c, c}))) {
          if (s.reward != static_cast<double>(c.size())) wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(pool->counters().samples, 600);
}

TEST(ScoringPoolTest, DestroyingThePoolWithAHungCallReturns) {
  auto f = std::make_shared<testing::ScriptedReward>(3600);
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, 0.0);
  std::promise<std::vector<ScoredSample>> result;
  {
    auto pool = make_pool(reward, 1, 0.2);
    pool->submit(samples({"hang", "a"}),
                 [&](std::vector<ScoredSample> out) { result.set_value(std::move(out)); });
  }  // waits for the deadline of the hung call, not for the call
  std::vector<ScoredSample> out = result.get_future().get();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].timeouts, 1);
}

TEST(ScoringPoolTest, ACallbackMaySubmitMoreWorkWhileTheQueueIsFull) {
  auto f = std::make_shared<testing::ScriptedReward>();
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, 0.0);
  auto pool = make_pool(reward, 1, 10, /*queue_size=*/1);
  std::promise<int> finished;
  std::function<void(int)> chain = [&](int left) {
    pool->submit(samples({"a", "bb", "ccc"}), [&, left](std::vector<ScoredSample> out) {
      if (out[2].reward != 3.0) finished.set_value(-1);
      if (left == 0) {
        finished.set_value(0);
      } else {
        chain(left - 1);  // from the completion thread, into a full queue
      }
    });
  };
  chain(20);
  std::future<int> result = finished.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "deadlock";
  EXPECT_EQ(result.get(), 0);
  // score() from inside a callback works too.
  std::promise<double> inner;
  pool->submit(samples({"x"}), [&](std::vector<ScoredSample>) {
    inner.set_value(pool->score(samples({"abcd"}))[0].reward);
  });
  std::future<double> inner_result = inner.get_future();
  ASSERT_EQ(inner_result.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(inner_result.get(), 4.0);
}

TEST(ScoringPoolTest, WallClockASlowCallbackDoesNotDelayTimeouts) {
  auto f = std::make_shared<testing::ScriptedReward>(3600);
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, 0.0);
  auto pool = make_pool(reward, 2, 0.2);
  std::promise<void> slow_started;
  pool->submit(samples({"hang"}), [&](std::vector<ScoredSample>) {
    slow_started.set_value();
    std::this_thread::sleep_for(std::chrono::seconds(3));  // holds the completion thread
  });
  slow_started.get_future().wait();
  // The watchdog still times out this hung call after 0.2 s, not after the callback.
  const auto start = std::chrono::steady_clock::now();
  std::vector<ScoredSample> out = pool->score(samples({"hang"}));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(out[0].timeouts, 1);
  EXPECT_LT(waited, 2.5);  // 0.2 s deadline vs a 3 s callback: not a speed assertion
}

TEST(ScoringPoolTest, AHugeTimeoutMeansNoTimeout) {
  auto f = std::make_shared<testing::ScriptedReward>(/*hang_s=*/0.3);
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"f", 1.0, f}}, 0.0);
  for (double timeout : {1e10, 1e300}) {
    auto pool = make_pool(reward, 1, timeout);
    std::vector<ScoredSample> out = pool->score(samples({"hang"}));
    EXPECT_EQ(out[0].timeouts, 0) << timeout;
    EXPECT_EQ(out[0].reward, 4.0) << timeout;
  }
}

TEST(ScoringPoolTest, DestroyingThePoolWhileASubmitterIsBlockedCancelsTheRest) {
  std::promise<void> release;
  auto gate = std::make_shared<GateReward>();
  gate->open_ = release.get_future().share();
  auto reward =
      std::make_shared<const CompositeReward>(std::vector<WeightedReward>{{"g", 1.0, gate}}, 0.0);
  ScoringPoolOptions o;
  o.workers = 1;
  o.timeout_s = 60;
  o.queue_size = 1;
  // The running call ends only once the destructor refuses new calls.
  o.on_stopping_for_test = [&release] { release.set_value(); };
  auto pool = std::move(*ScoringPool::create(reward, o));
  std::promise<std::vector<ScoredSample>> result;
  std::thread submitter([&] {
    pool->submit(samples(std::vector<std::string>(200, "s")),
                 [&](std::vector<ScoredSample> out) { result.set_value(std::move(out)); });
  });
  while (gate->started_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pool.reset();  // waits for the submitter, then returns
  submitter.join();
  std::vector<ScoredSample> out = result.get_future().get();
  ASSERT_EQ(out.size(), 200u);
  EXPECT_EQ(out[0].reward, 1.0);  // running when the destructor started
  EXPECT_THAT(out.back().errors.at(0), HasSubstr("the scoring pool stopped"));
}

}  // namespace
}  // namespace flywheel::rewards
