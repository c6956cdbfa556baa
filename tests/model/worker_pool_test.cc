#include "flywheel/model/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace flywheel::model {
namespace {

TEST(WorkerPoolTest, RunsEveryPartOncePerRunAndPartZeroOnTheCaller) {
  for (int threads : {1, 2, 4}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    std::vector<std::atomic<int>> counts(threads);
    std::thread::id part_zero;
    for (int run = 0; run < 200; ++run) {
      pool.run([&](int part) {
        counts[part].fetch_add(1);
        if (part == 0) part_zero = std::this_thread::get_id();
      });
    }
    for (int i = 0; i < threads; ++i) EXPECT_EQ(counts[i].load(), 200) << "part " << i;
    EXPECT_EQ(part_zero, std::this_thread::get_id());
  }
}

TEST(WorkerPoolTest, WakesWorkersThatWentToSleep) {
  WorkerPool pool(3);
  std::atomic<int> total{0};
  for (int run = 0; run < 5; ++run) {
    // Longer than the workers' spin: they sleep on the condition variable in between.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.run([&](int part) { total.fetch_add(part + 1); });
  }
  EXPECT_EQ(total.load(), 5 * (1 + 2 + 3));
}

TEST(WorkerPoolTest, SerialisesRunsFromSeveralThreads) {
  WorkerPool pool(2);
  std::atomic<int> inside{0}, most{0}, total{0};
  auto caller = [&] {
    for (int run = 0; run < 500; ++run) {
      pool.run([&](int) {
        const int now = inside.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        total.fetch_add(1);
        inside.fetch_sub(1);
      });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 500 * 2);
  EXPECT_LE(most.load(), 2);  // never more parts at once than one run has
}

}  // namespace
}  // namespace flywheel::model
