// gemm_bench: y = x w^T + b for the projections of a 100M-parameter Qwen2-shaped model at the row
// counts of decode and prefill (1-512 rows), in float32 through BLAS (at::addmm, or at::addmv for
// one row) and flywheel's small_linear kernels, and in bfloat16 through LibTorch (oneDNN) and
// small_linear's bfloat16 kernels (AVX512-BF16, and AVX2 widening to float32), beside the machine's
// memory bandwidth and matmul peaks measured in the same run at the same thread count.
// AVX512-BF16 runs twice: packing w's panels on every call ("avx512 bf16") and reading them packed
// by PackedWeights ("avx512 bf16 pk"), as the engine's decoder does.
//
//   build/benchmarks/gemm_bench [--threads N] [--rows 1,8,32,64,128,512]
//
// BLAS runs with N threads and ATen 1, LibTorch's bfloat16 with ATen N (oneDNN's OpenMP pool) and
// BLAS 1; small_linear splits w between the N threads of its own WorkerPool with ATen and BLAS at
// 1, as the decoder runs it. Weight GB/s = bytes of w / time (the bound at few rows).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "bench_util.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/cpu/packed_weights.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/cpu/thread_layout.h"

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
  layout(threads, flywheel::model::ThreadSplit::kAten);
  const double bf16_peak = flywheel::bench::matmul_gflops(at::kBFloat16);
  const GemmIsa best = flywheel::model::detect_gemm_isa();
  flywheel::model::WorkerPool pool(threads);
  std::printf("gemm_bench: x w^T + b, %d threads\ncpu: %s, small_linear kernels: %s%s\n", threads,
              flywheel::model::describe(flywheel::model::detect_cpu_features()).c_str(),
              flywheel::model::gemm_isa_name(best),
              flywheel::model::avx512_bf16_supported() ? " + avx512 bf16" : "");
  std::printf(
      "machine (measured in this run, %d threads): memory read %.1f GB/s, matmul (1024^3) BLAS "
      "float32 %.1f GFLOP/s, LibTorch bfloat16 %.1f GFLOP/s\n\n",
      threads, bandwidth, peak, bf16_peak);
  // The columns, in the order they run: each layout once, the kernels after OpenBLAS's threads
  // have stopped spinning (they wait ~0.1 s for more work).
  struct Column {
    const char* name;
    at::ScalarType dtype;
    GemmIsa isa;  // kNone: LibTorch
    flywheel::model::ThreadSplit split;
    bool runs;
    bool packed = false;  // w's panels kept packed (PackedWeights)
  };
  const Column columns[] = {
      {"BLAS f32", at::kFloat, GemmIsa::kNone, flywheel::model::ThreadSplit::kBlas, true},
      {"avx512 f32", at::kFloat, GemmIsa::kAvx512, flywheel::model::ThreadSplit::kKernels,
       flywheel::model::gemm_isa_supported(GemmIsa::kAvx512)},
      {"avx2 f32", at::kFloat, GemmIsa::kAvx2, flywheel::model::ThreadSplit::kKernels,
       flywheel::model::gemm_isa_supported(GemmIsa::kAvx2)},
      {"LibTorch bf16", at::kBFloat16, GemmIsa::kNone, flywheel::model::ThreadSplit::kAten, true},
      {"avx512 bf16", at::kBFloat16, GemmIsa::kAvx512, flywheel::model::ThreadSplit::kKernels,
       flywheel::model::avx512_bf16_supported()},
      {"avx512 bf16 pk", at::kBFloat16, GemmIsa::kAvx512, flywheel::model::ThreadSplit::kKernels,
       flywheel::model::avx512_bf16_supported(), true},
      {"avx2 bf16", at::kBFloat16, GemmIsa::kAvx2, flywheel::model::ThreadSplit::kKernels,
       flywheel::model::gemm_isa_supported(GemmIsa::kAvx2)},
  };
  constexpr int kColumns = sizeof(columns) / sizeof(columns[0]);
  std::printf("%-8s %11s %5s", "proj", "w [N, K]", "rows");
  for (const Column& column : columns) std::printf(" | %-18s", column.name);
  std::printf("\n%-26s", "");
  for (int i = 0; i < kColumns; ++i) std::printf(" | %-18s", "GFLOP/s (w GB/s)");
  std::printf("\n");
  const std::vector<Shape> shapes = {{"q/o", 768, 768},
                                     {"k/v", 256, 768},
                                     {"gate/up", 2048, 768},
                                     {"down", 768, 2048},
                                     {"lm_head", 32000, 768}};
  struct Case {
    const Shape* shape;
    int64_t m;
    double seconds[kColumns];  // 0 = not run
  };
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    for (int64_t m : {1, 8, 32, 64, 128, 512}) {
      if (flywheel::bench::listed(rows_arg, std::to_string(m))) cases.push_back({&s, m, {}});
    }
  }
  for (int column = 0; column < kColumns; ++column) {
    const Column& col = columns[column];
    if (!col.runs) continue;
    layout(col.split == flywheel::model::ThreadSplit::kKernels ? 1 : threads, col.split);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (Case& c : cases) {
      const Shape& s = *c.shape;
      const at::TensorOptions options = at::TensorOptions().dtype(col.dtype);
      at::Tensor w = at::randn({s.n, s.k}).to(options), b = at::randn({s.n}).to(options);
      at::Tensor x = at::randn({c.m, s.k}).to(options);
      const int reps = s.n * s.k * c.m > (int64_t{1} << 28) ? 3 : 10;
      flywheel::model::PackedWeights packs;
      flywheel::model::SmallLinearOptions kernel{col.isa, &pool};
      if (col.packed) kernel.packs = &packs;
      c.seconds[column] = best_time(reps, [&] {
        if (col.isa != GemmIsa::kNone) {
          flywheel::model::small_linear(x, w, b, kernel);
        } else if (c.m == 1 && col.dtype == at::kFloat) {
          at::addmv(b, w, x.view({-1}));
        } else {
          at::addmm(b, x, w.t());
        }
      });
    }
  }
  for (const Case& c : cases) {
    const Shape& s = *c.shape;
    std::printf("%-8s %5lldx%-5lld %5lld", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), static_cast<long long>(c.m));
    for (int i = 0; i < kColumns; ++i) {
      const double flops = 2.0 * c.m * s.n * s.k;
      const double bytes = (columns[i].dtype == at::kFloat ? 4.0 : 2.0) * s.n * s.k;
      char buf[64] = "-";
      if (c.seconds[i] > 0) {
        std::snprintf(buf, sizeof buf, "%7.1f (%5.1f)", flops / c.seconds[i] / 1e9,
                      bytes / c.seconds[i] / 1e9);
      }
      std::printf(" | %-18s", buf);
    }
    std::printf("\n");
  }
  return 0;
}
