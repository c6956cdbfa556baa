// model_bench: forward throughput of a ~100M-parameter Qwen2-shaped decoder on this machine,
// printed beside the float32 matmul throughput measured in the same run, so that the fraction
// of the machine's matmul peak is visible.
//
//   build/benchmarks/model_bench [--threads N] [--dtype float32|bfloat16]
//
// Rows: forwards without a cache (the learner's no-grad passes), then the engine's prefill of one
// prompt into a cache slot.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "bench_util.h"
#include "flywheel/model/decoder.h"
#include "flywheel/model/hf_checkpoint.h"

namespace {

using flywheel::bench::best_time;
using flywheel::bench::matmul_gflops;

// ~100M parameters: hidden 768, 12 layers, 12 heads / 4 kv heads, vocab 32000.
flywheel::model::ModelConfig bench_config() {
  return flywheel::bench::qwen2_config(32000, 768, 2048, 12, 12, 4);
}

// Multiply-add FLOPs of one forward over `tokens` tokens of length `seq` (projections, MLP,
// attention scores and values with a causal mask, lm_head).
double forward_flops(const flywheel::model::ModelConfig& c, int64_t batch, int64_t seq) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim;
  const double per_token_layer = 2 * (h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size);
  const double attention_per_token = 2 * 2 * q * (seq + 1) / 2.0;  // QK^T and PV, causal average
  const double per_token =
      c.num_hidden_layers * (per_token_layer + attention_per_token) + 2 * h * c.vocab_size;
  return per_token * batch * seq;
}

}  // namespace

int main(int argc, char** argv) {
  const flywheel::bench::BenchArgs args = flywheel::bench::parse_bench_args(argc, argv);
  const std::string& dtype_name = args.dtype;
  auto dtype = flywheel::model::parse_dtype(dtype_name);
  if (!dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  const int budget = flywheel::bench::bench_budget(args);
  const std::string layout = flywheel::bench::apply_bench_threads(args, *dtype);
  at::NoGradGuard no_grad;
  const double peak = matmul_gflops(*dtype);
  auto config = bench_config();
  auto model = flywheel::model::DecoderModel::create(config, {*dtype, at::kCPU, budget});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->init_random(1);
  std::printf("model_bench: qwen2-shaped decoder, %.1fM parameters, %s\n%s\n",
              config.num_parameters() / 1e6, dtype_name.c_str(), layout.c_str());
  std::printf("machine: %s matmul 1024^3 = %.1f GFLOP/s (measured in this run)\n\n",
              dtype_name.c_str(), peak);
  std::printf("%6s %6s %12s %12s %12s %10s\n", "batch", "seq", "forward_s", "tokens/s", "GFLOP/s",
              "of_matmul");
  struct Shape {
    int64_t batch, seq;
    int reps;
  };
  for (Shape s : {Shape{1, 128, 5}, Shape{32, 64, 2}}) {
    flywheel::model::ForwardBatch batch;
    batch.tokens = at::randint(config.vocab_size, {s.batch, s.seq}, at::kLong);
    batch.positions = at::arange(s.seq, at::kLong).expand({s.batch, s.seq}).contiguous();
    double t = best_time(s.reps, [&] { (*model)->logits((*model)->forward(batch)); });
    double gflops = forward_flops(config, s.batch, s.seq) / t / 1e9;
    std::printf("%6lld %6lld %12.3f %12.1f %12.1f %9.1f%%\n", static_cast<long long>(s.batch),
                static_cast<long long>(s.seq), t, s.batch * s.seq / t, gflops, 100 * gflops / peak);
  }
  // The engine's prefill: one prompt into a cache slot (on the CPU kernels every token's
  // attention runs in decode_attention's kernel: docs/rollout.md "Equal log-probs").
  std::printf("\nprefill into a cache (the engine's path), logits of the last token only:\n");
  std::printf("%6s %6s %12s %12s %12s %10s\n", "batch", "seq", "prefill_s", "tokens/s", "GFLOP/s",
              "of_matmul");
  for (Shape s : {Shape{1, 128, 5}, Shape{1, 1024, 2}, Shape{1, 4096, 1}}) {
    auto cache = (*model)->make_cache(s.batch, s.seq);
    if (!cache.ok()) return 1;
    flywheel::model::ForwardBatch batch;
    batch.tokens = at::randint(config.vocab_size, {s.batch, s.seq}, at::kLong);
    batch.positions = at::arange(s.seq, at::kLong).expand({s.batch, s.seq}).contiguous();
    for (int64_t b = 0; b < s.batch; ++b) {
      batch.slots.push_back(b);
      batch.lengths.push_back(s.seq);
    }
    double t = best_time(s.reps, [&] {
      (*model)->logits((*model)->forward(batch, cache->get()).select(1, s.seq - 1));
    });
    // The head runs on one token per row: its FLOPs are left out of the count.
    const double flops = forward_flops(config, s.batch, s.seq) -
                         2.0 * config.hidden_size * config.vocab_size * s.batch * (s.seq - 1);
    const double gflops = flops / t / 1e9;
    std::printf("%6lld %6lld %12.3f %12.1f %12.1f %9.1f%%\n", static_cast<long long>(s.batch),
                static_cast<long long>(s.seq), t, s.batch * s.seq / t, gflops, 100 * gflops / peak);
  }
  return 0;
}
