// A fork-join pool for flywheel's own CPU kernels (small_gemm.h).
//
// ATen's at::parallel_for cannot serve them: with OpenMP it is an inline template whose pragma
// only takes effect in code compiled with -fopenmp, and linking flywheel against an OpenMP
// runtime of its own would put a second one beside LibTorch's bundled copy. The pool's workers
// spin briefly after each run (decode steps call the kernels back to back, tens of microseconds
// apart) and then sleep, so they do not hold a core while OpenBLAS or ATen use it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::model {

class WorkerPool {
 public:
  // A pool running `threads` (>= 1) parts at once: the caller's thread and threads - 1 workers.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls part(i) for every i in [0, threads()) — part 0 on the calling thread — and returns
  // when all have returned. Calls from several threads are serialised. If parts throw, the
  // first exception is rethrown here once every part has finished. The workers run their parts
  // in c10::InferenceMode when the caller is in it (other thread-local state is not carried).
  void run(const std::function<void(int)>& part);

 private:
  void work(int index);

  std::vector<std::thread> workers_;
  absl::Mutex run_mutex_;  // one run at a time
  absl::Mutex mutex_;      // sleeping workers wait on wake_ under it
  absl::CondVar wake_;
  const std::function<void(int)>* part_ = nullptr;  // set by run() while pending_ > 0
  bool inference_mode_ = false;  // the caller's c10::InferenceMode, set with part_
  // Spun on by awake workers, so atomics; changed under mutex_ so that no sleeper misses one.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  absl::Mutex error_mutex_;
  std::exception_ptr error_ ABSL_GUARDED_BY(error_mutex_);  // the current run's first exception
};

// Calls fn(begin, end) for consecutive ranges covering [0, rows), one per thread of `pool` (at
// most, and at least `min_rows` rows each); inline when `pool` is null or there is one range.
// For row-independent work (each row's result depends on that row alone), so the split does not
// change results.
void parallel_rows(WorkerPool* pool, int64_t rows, int64_t min_rows,
                   const std::function<void(int64_t, int64_t)>& fn);

// Calls fn(begin, end) for consecutive ranges of `chunk` rows (the last one shorter) covering
// [0, rows), each once, handed out in order to whichever of the pool's threads is free: a thread
// that the memory system or the hypervisor slows takes fewer, where parallel_rows' even split
// would leave the others waiting for it. Inline when `pool` is null or one chunk covers [0, rows).
// For row-independent work, like parallel_rows.
void parallel_chunks(WorkerPool* pool, int64_t rows, int64_t chunk,
                     const std::function<void(int64_t, int64_t)>& fn);

}  // namespace flywheel::model
