// Timing and machine-limit helpers shared by the benchmarks.
#pragma once

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>

namespace flywheel::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best-of-`reps` wall time of `fn`, after one warm-up call.
template <typename F>
double best_time(int reps, F&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    fn();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// Matrix-multiply throughput (1024^3 GEMM) in GFLOP/s, at the current thread settings.
inline double matmul_gflops(at::ScalarType dtype) {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  double t = best_time(5, [&] { at::mm(a, b); });
  return 2.0 * n * n * n / t / 1e9;
}

// Streaming read bandwidth in GB/s: the sum of a 1 GiB float32 tensor.
inline double memory_bandwidth_gbs() {
  at::Tensor buffer = at::ones({int64_t{1} << 28}, at::kFloat);
  double t = best_time(3, [&] { buffer.sum().item<float>(); });
  return buffer.numel() * 4.0 / t / 1e9;
}

}  // namespace flywheel::bench
