// Timing and machine-limit helpers shared by the benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/cpu/thread_layout.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/model_config.h"

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

// LibTorch's matmul_gflops on `threads` threads in the pool that runs its GEMMs for `dtype`
// (OpenBLAS's for float32, ATen's OpenMP pool, i.e. oneDNN, for bfloat16): the peak of LibTorch on
// the whole budget, whatever layout the bench runs under. Leaves that layout applied: call it
// before the bench applies its own.
inline double libtorch_matmul_gflops(at::ScalarType dtype, int threads) {
  model::ThreadLayoutOptions options;
  options.threads = threads;
  options.dtype = dtype;
  options.split = dtype == at::kFloat ? model::ThreadSplit::kBlas : model::ThreadSplit::kAten;
  (void)model::apply_thread_layout(options);
  const double gflops = matmul_gflops(dtype);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its threads stop spinning
  return gflops;
}

// flywheel's projection kernels (small_gemm.h) on a 1024^3 problem in `dtype`, in GFLOP/s, on
// `pool`'s threads: on CPUs where they beat LibTorch, the matmul peak a decode step can reach.
inline double kernel_matmul_gflops(model::WorkerPool* pool, at::ScalarType dtype = at::kFloat) {
  const int64_t n = 1024;
  at::Tensor x = at::randn({n, n}).to(dtype), w = at::randn({n, n}).to(dtype);
  double t = best_time(5, [&] { model::small_linear(x, w, {}, {model::GemmIsa::kAuto, pool}); });
  return 2.0 * n * n * n / t / 1e9;
}

// Streaming read bandwidth in GB/s: the sum of a 1 GiB float32 tensor, on `threads` ATen threads
// (0: the current count). ATen's thread count is restored afterwards, and the bench waits for
// its OpenMP threads to stop spinning before anything else is timed.
inline double memory_bandwidth_gbs(int threads = 0) {
  const int before = at::get_num_threads();
  if (threads > 0) at::set_num_threads(threads);
  at::Tensor buffer = at::ones({int64_t{1} << 28}, at::kFloat);
  double t = best_time(3, [&] { buffer.sum().item<float>(); });
  at::set_num_threads(before);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return buffer.numel() * 4.0 / t / 1e9;
}

// The flags the model benchmarks share: --threads N (the budget; 0 = LibTorch's default),
// --thread-split auto|kernels|blas|aten|none (none: only at::set_num_threads(N), BLAS left at its
// own default, as before flywheel chose the layout), --dtype NAME, --steps S, --batches 1,8,64,
// --models small,100M, --no-extras, --device cpu|cuda.
struct BenchArgs {
  int threads = 0;
  std::string thread_split = "auto";
  std::string dtype = "float32";
  bool dtype_given = false;    // --dtype was on the command line (else the bench may pick its own)
  std::string device = "cpu";  // rollout_bench only: cpu or cuda
  int64_t steps = 32;
  std::string batches;     // comma-separated; "" = the bench's own list
  std::string models;      // comma-separated; "" = all
  bool no_extras = false;  // --no-extras: rollout_bench skips the sampled row and update pause
};

inline BenchArgs parse_bench_args(int argc, char** argv) {
  BenchArgs args;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-extras")) args.no_extras = true;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads")) {
      args.threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--thread-split")) {
      args.thread_split = argv[++i];
    } else if (!std::strcmp(argv[i], "--dtype")) {
      args.dtype = argv[++i];
      args.dtype_given = true;
    } else if (!std::strcmp(argv[i], "--device")) {
      args.device = argv[++i];
    } else if (!std::strcmp(argv[i], "--steps")) {
      args.steps = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--batches")) {
      args.batches = argv[++i];
    } else if (!std::strcmp(argv[i], "--models")) {
      args.models = argv[++i];
    }
  }
  return args;
}

// The thread budget of a bench run: --threads, else LibTorch's default (OMP_NUM_THREADS if set,
// else the cores). Call it before apply_bench_threads changes LibTorch's count.
inline int bench_budget(const BenchArgs& args) {
  return args.threads > 0 ? args.threads : std::max(1, at::get_num_threads());
}

// Applies --threads and --thread-split for a model in `dtype`; returns the layout's log line
// ("" and exits with status 2 on an unknown split).
inline std::string apply_bench_threads(const BenchArgs& args, at::ScalarType dtype) {
  if (args.thread_split == "none") {
    if (args.threads > 0) at::set_num_threads(args.threads);
    const int blas = model::current_blas_threads();
    return "threads: " + std::to_string(at::get_num_threads()) + " (ATen intra-op " +
           std::to_string(at::get_num_threads()) + ", BLAS " +
           (blas > 0 ? std::to_string(blas) : std::string("unknown")) +
           ", its own default: --thread-split none) for " + model::dtype_name(dtype);
  }
  model::ThreadLayoutOptions options;
  options.threads = args.threads;
  options.dtype = dtype;
  if (!model::parse_thread_split(args.thread_split, &options.split)) {
    std::fprintf(stderr, "--thread-split: expected auto, kernels, blas, aten or none\n");
    std::exit(2);
  }
  return model::apply_thread_layout(options).to_string();
}

// Whether `item` is in the comma-separated `list` (an empty list holds everything).
inline bool listed(const std::string& list, const std::string& item) {
  if (list.empty()) return true;
  return ("," + list + ",").find("," + item + ",") != std::string::npos;
}

// A Qwen2-shaped config with tied embeddings and q/k/v biases.
inline model::ModelConfig qwen2_config(int64_t vocab, int64_t hidden, int64_t intermediate,
                                       int64_t layers, int64_t heads, int64_t kv_heads) {
  model::ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.qkv_bias = true;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 4096;
  return c;
}

// A Qwen3-MoE config: `layers` sparse layers of `experts` experts (`k` per token) of width
// `expert_width`, attention as qwen2_config's (no biases, q/k norms).
inline model::ModelConfig qwen3_moe_config(int64_t vocab, int64_t hidden, int64_t layers,
                                           int64_t heads, int64_t kv_heads, int64_t experts,
                                           int64_t k, int64_t expert_width) {
  model::ModelConfig c = qwen2_config(vocab, hidden, expert_width, layers, heads, kv_heads);
  c.model_type = "qwen3_moe";
  c.qkv_bias = false;
  c.qk_norm = true;
  c.num_experts = experts;
  c.num_experts_per_tok = k;
  c.moe_intermediate_size = expert_width;
  c.norm_topk_prob = true;
  return c;
}

}  // namespace flywheel::bench
