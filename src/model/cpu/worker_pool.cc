#include "flywheel/model/cpu/worker_pool.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <c10/core/InferenceMode.h>

namespace flywheel::model {
namespace {

// How long a worker waits for the next run before it sleeps. A decode step's projections are
// tens of microseconds apart; BLAS and ATen calls that need the core are longer than this.
constexpr std::chrono::microseconds kSpin{100};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mutex_);
    stop_.store(true);
  }
  wake_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

void WorkerPool::run(const std::function<void(int)>& part) {
  if (workers_.empty()) {
    part(0);
    return;
  }
  absl::MutexLock one_run(&run_mutex_);
  {
    absl::MutexLock lock(&error_mutex_);
    error_ = nullptr;
  }
  part_ = &part;
  inference_mode_ = c10::InferenceMode::is_enabled();
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.SignalAll();
  try {
    part(0);
  } catch (...) {
    absl::MutexLock lock(&error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  while (pending_.load(std::memory_order_acquire) != 0) relax();
  part_ = nullptr;
  std::exception_ptr error;
  {
    absl::MutexLock lock(&error_mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void WorkerPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen && !stop_.load(); ++i) {
      if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
        absl::MutexLock lock(&mutex_);
        while (generation_.load() == seen && !stop_.load()) wake_.Wait(&mutex_);
        break;
      }
      relax();
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    try {
      // The caller's InferenceMode (thread-local): its tensors may be written in place here.
      std::optional<c10::InferenceMode> inference;
      if (inference_mode_) inference.emplace();
      (*part_)(index);
    } catch (...) {
      absl::MutexLock lock(&error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void parallel_rows(WorkerPool* pool, int64_t rows, int64_t min_rows,
                   const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t most = min_rows > 0 ? rows / min_rows : rows;
  const int64_t parts =
      pool == nullptr ? 1 : std::max<int64_t>(1, std::min<int64_t>(pool->threads(), most));
  if (parts <= 1) {
    if (rows > 0) fn(0, rows);
    return;
  }
  pool->run([&](int part) {
    if (part >= parts) return;
    const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

void parallel_chunks(WorkerPool* pool, int64_t rows, int64_t chunk,
                     const std::function<void(int64_t, int64_t)>& fn) {
  chunk = std::max<int64_t>(1, chunk);
  if (pool == nullptr || pool->threads() == 1 || rows <= chunk) {
    if (rows > 0) fn(0, rows);
    return;
  }
  std::atomic<int64_t> next{0};
  pool->run([&](int) {
    for (int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed); begin < rows;
         begin = next.fetch_add(chunk, std::memory_order_relaxed)) {
      fn(begin, std::min(rows, begin + chunk));
    }
  });
}

}  // namespace flywheel::model
