#include "flywheel/model/cpu/worker_pool.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
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

TEST(WorkerPoolTest, RethrowsAPartsExceptionAfterEveryPartFinished) {
  WorkerPool pool(3);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.run([&](int part) {
    if (part == 2) throw std::runtime_error("part 2 failed");
    finished.fetch_add(1);
  }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 2);
  // The pool still runs afterwards.
  pool.run([&](int) { finished.fetch_add(1); });
  EXPECT_EQ(finished.load(), 5);
}

// A caller in c10::InferenceMode (the engine's steps) makes inference tensors, which LibTorch
// lets no thread outside InferenceMode write in place: its workers run in it too, and run outside
// it again for a caller outside it.
TEST(WorkerPoolTest, WorkersRunInTheCallersInferenceMode) {
  WorkerPool pool(3);
  for (bool inference : {true, false, true}) {
    std::optional<c10::InferenceMode> guard;
    if (inference) guard.emplace();
    at::Tensor t = at::zeros({3});
    std::vector<int> in_mode(3, -1);
    pool.run([&](int part) {
      in_mode[part] = c10::InferenceMode::is_enabled() ? 1 : 0;
      t[part].fill_(part + 1);  // throws on a worker outside InferenceMode for an inference tensor
    });
    EXPECT_EQ(in_mode, std::vector<int>(3, inference ? 1 : 0));
    EXPECT_TRUE(at::equal(t, at::tensor({1.0f, 2.0f, 3.0f})));
  }
}

TEST(WorkerPoolTest, ParallelRowsCoversEveryRowOnceInRangesOfAtLeastMinRows) {
  WorkerPool pool(3);
  for (int64_t rows : {0, 1, 7, 8, 23, 64}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
    std::atomic<int> ranges{0}, shortest{1 << 30};
    parallel_rows(&pool, rows, /*min_rows=*/8, [&](int64_t begin, int64_t end) {
      ranges.fetch_add(1);
      int len = static_cast<int>(end - begin), s = shortest.load();
      while (len < s && !shortest.compare_exchange_weak(s, len)) {
      }
      for (int64_t r = begin; r < end; ++r) seen[r].fetch_add(1);
    });
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(seen[r].load(), 1) << rows << " rows, row " << r;
    EXPECT_LE(ranges.load(), 3);
    if (ranges.load() > 1) EXPECT_GE(shortest.load(), 8) << rows << " rows";
  }
  int calls = 0;
  parallel_rows(nullptr, 5, 1, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 5);
  });
  EXPECT_EQ(calls, 1);
}

TEST(WorkerPoolTest, ParallelChunksCoversEveryRowOnceInChunksOnEveryThread) {
  WorkerPool pool(3);
  for (int64_t rows : {0, 1, 7, 8, 23, 640}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
    std::atomic<int> bad{0};
    std::mutex mutex;
    std::set<std::thread::id> threads;
    parallel_chunks(&pool, rows, /*chunk=*/8, [&](int64_t begin, int64_t end) {
      // Whole chunks from a multiple of 8; only the last one shorter.
      if (begin % 8 != 0 || (end - begin != 8 && end != rows) || end <= begin) bad.fetch_add(1);
      for (int64_t r = begin; r < end; ++r) seen[r].fetch_add(1);
      if (rows == 640) {  // long enough chunks that the work spreads
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        std::lock_guard<std::mutex> lock(mutex);
        threads.insert(std::this_thread::get_id());
      }
    });
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(seen[r].load(), 1) << rows << " rows, row " << r;
    EXPECT_EQ(bad.load(), 0) << rows << " rows";
    // 80 chunks of 200 us: a thread that finishes one takes the next, so more than one takes
    // some (not necessarily all three on a loaded two-core machine).
    if (rows == 640) EXPECT_GE(threads.size(), 2u);
  }
  int calls = 0;
  parallel_chunks(nullptr, 50, 8, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 50);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace flywheel::model
