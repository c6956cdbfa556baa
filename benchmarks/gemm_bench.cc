// gemm_bench: float32 y = x w^T + b for the projections of a 100M-parameter Qwen2-shaped model at
// the row counts of decode and prefill (1-512 rows), through BLAS (at::addmm, or at::addmv for one
// row) and through flywheel's small_linear kernels, beside the machine's memory bandwidth and BLAS
// matmul peak measured in the same run at the same thread count.
//
//   build/benchmarks/gemm_bench [--threads N] [--rows 1,8,32,64,128,512]
//
// Both run under the float32 layout (ATen 1 thread + BLAS N); small_linear splits w between the
// N threads of its own WorkerPool, as the decoder runs it. Weight GB/s = bytes of w / time (the
// bound at few rows).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "bench_util.h"
#include "flywheel/model/cpu_features.h"
#include "flywheel/model/small_gemm.h"
#include "flywheel/model/thread_layout.h"

namespace {

using flywheel::bench::best_time;
using flywheel::model::GemmIsa;

void layout(int threads, flywheel::model::ThreadSplit split) {
  flywheel::model::ThreadLayoutOptions options;
  options.threads = threads;
  options.split = split;
  (void)flywheel::model::apply_thread_layout(options);
}

struct Shape {
  const char* name;
  int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::string rows_arg = "1,8,32,64,128,512";
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--rows")) rows_arg = argv[++i];
  }
  at::NoGradGuard no_grad;
  // Bandwidth with BLAS on one thread: OpenBLAS's threads spin for a while once started.
  layout(threads, flywheel::model::ThreadSplit::kKernels);
  const double bandwidth = flywheel::bench::memory_bandwidth_gbs(threads);
  layout(threads, flywheel::model::ThreadSplit::kBlas);
  const double peak = flywheel::bench::matmul_gflops(at::kFloat);
  const GemmIsa best = flywheel::model::detect_gemm_isa();
  flywheel::model::WorkerPool pool(threads);
  std::printf("gemm_bench: float32 x w^T + b, %d threads\ncpu: %s, small_linear kernels: %s\n",
              threads, flywheel::model::describe(flywheel::model::detect_cpu_features()).c_str(),
              flywheel::model::gemm_isa_name(best));
  std::printf(
      "machine (measured in this run, %d threads): memory read %.1f GB/s, BLAS matmul %.1f "
      "GFLOP/s (1024^3)\n\n",
      threads, bandwidth, peak);
  std::printf("%-8s %11s %5s | %-22s | %-22s | %-22s\n", "proj", "w [N, K]", "rows",
              "BLAS GFLOP/s (w GB/s)", "avx512", "avx2");
  const std::vector<Shape> shapes = {{"q/o", 768, 768},
                                     {"k/v", 256, 768},
                                     {"gate/up", 2048, 768},
                                     {"down", 768, 2048},
                                     {"lm_head", 32000, 768}};
  struct Case {
    const Shape* shape;
    int64_t m;
    double seconds[3];  // BLAS, avx512, avx2; 0 = not run
  };
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    for (int64_t m : {1, 8, 32, 64, 128, 512}) {
      if (flywheel::bench::listed(rows_arg, std::to_string(m))) cases.push_back({&s, m, {0, 0, 0}});
    }
  }
  // BLAS first, all cases; then the kernels, after OpenBLAS's threads have stopped spinning
  // (they wait ~0.1 s for more work) and with BLAS at 1 thread, as the decoder runs them.
  const GemmIsa isas[3] = {GemmIsa::kNone, GemmIsa::kAvx512, GemmIsa::kAvx2};
  for (int column = 0; column < 3; ++column) {
    if (column == 1) {
      layout(1, flywheel::model::ThreadSplit::kBlas);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (Case& c : cases) {
      if (column > 0 && !flywheel::model::gemm_isa_supported(isas[column])) continue;
      const Shape& s = *c.shape;
      at::Tensor w = at::randn({s.n, s.k}), b = at::randn({s.n}), x = at::randn({c.m, s.k});
      const int reps = s.n * s.k * c.m > (int64_t{1} << 28) ? 3 : 10;
      const flywheel::model::SmallLinearOptions options{isas[column], &pool};
      c.seconds[column] = best_time(reps, [&] {
        if (column > 0) {
          flywheel::model::small_linear(x, w, b, options);
        } else if (c.m == 1) {
          at::addmv(b, w, x.view({-1}));
        } else {
          at::addmm(b, x, w.t());
        }
      });
    }
  }
  for (const Case& c : cases) {
    const Shape& s = *c.shape;
    const double flops = 2.0 * c.m * s.n * s.k, bytes = 4.0 * s.n * s.k;
    std::string cells[3];
    for (int i = 0; i < 3; ++i) {
      char buf[64] = "-";
      if (c.seconds[i] > 0) {
        std::snprintf(buf, sizeof buf, "%8.1f (%5.1f)", flops / c.seconds[i] / 1e9,
                      bytes / c.seconds[i] / 1e9);
      }
      cells[i] = buf;
    }
    std::printf("%-8s %5lldx%-5lld %5lld | %-22s | %-22s | %-22s\n", s.name,
                static_cast<long long>(s.n), static_cast<long long>(s.k),
                static_cast<long long>(c.m), cells[0].c_str(), cells[1].c_str(), cells[2].c_str());
  }
  return 0;
}
