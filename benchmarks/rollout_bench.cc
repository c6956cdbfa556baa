// rollout_bench: decode throughput of the generation engine at batch 1, 8, 32 and 64, for a
// small and a ~100M-parameter model and a ~110M-parameter mixture of experts (moe), each beside
// its roofline on this machine (for moe, the bytes of the experts a step's tokens pick): the memory
// bandwidth and matmul GFLOP/s the bench measures itself, in the same run. Batch 1 also prints the
// read bandwidth its steps achieve (bytes of a step x steps per second) beside the measured one.
// Each tokens/s figure is the best of 3 runs, as the roofline figures are best-ofs.
//
//   build/benchmarks/rollout_bench [--device cpu|cuda] [--threads N]
//       [--thread-split auto|kernels|blas|aten|none] [--dtype float32|bfloat16|auto] [--steps S]
//       [--batches 1,8,64] [--models small,100M,moe] [--no-extras]
//
// After the table (unless --no-extras), for the 100M model: batch 1 on one thread against the
// whole budget beside each one's memory bandwidth, on a CPU with native bf16 bfloat16 against
// float32 at batch 64 (alternated), the engine's pause for a weight update, LoRA adapters merged
// against unmerged (decode and the pause of an adapters-only update), sampled against
// greedy decode at batch 64, and multi-turn episodes against single-turn decode
// (multi_turn_line.h).
//
// It prints the CPU model, whether it has native bf16 and the thread layout first. With
// --device cuda the model runs on cuda:0 (dtype bfloat16 unless --dtype says otherwise) and the
// roofline is the device's: the bandwidth of a 1 GiB device-to-device copy (bytes read +
// written) and an 8192^3 matmul in the run's dtype; timed regions end with a device sync.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include "bench_util.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/rollout/engine.h"
#include "multi_turn_line.h"

namespace {

using flywheel::bench::best_time;
using flywheel::bench::memory_bandwidth_gbs;
using flywheel::bench::qwen2_config;
using flywheel::bench::seconds_since;
using Clock = flywheel::bench::Clock;
using flywheel::model::ModelConfig;

constexpr const char* kUsage =
    "usage: rollout_bench [--device cpu|cuda] [--threads N] [--thread-split "
    "auto|kernels|blas|aten|none]\n"
    "                     [--dtype float32|bfloat16|auto] [--steps S] [--batches 1,8,32,64]\n"
    "                     [--models small,100M,moe] [--no-extras]\n"
    "  --device cuda: the model on cuda:0, dtype bfloat16 by default, the device's roofline\n";

// Waits for the work queued on `device` (nothing to wait for on the CPU), so that a timed
// region ends when the device has finished it.
void sync(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Device memory bandwidth in GB/s: a 1 GiB device-to-device copy, bytes read + written.
double device_copy_bandwidth_gbs(const at::Device& device) {
  const int64_t n = int64_t{1} << 28;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor src = at::ones({n}, options), dst = at::empty({n}, options);
  sync(device);
  const double t = best_time(5, [&] {
    dst.copy_(src);
    sync(device);
  });
  return 2.0 * n * 4.0 / t / 1e9;
}

// Matmul throughput on `device` in GFLOP/s: four 8192^3 GEMMs in `dtype` per timed region.
double device_matmul_gflops(at::ScalarType dtype, const at::Device& device) {
  const int64_t n = 8192;
  const int reps = 4;
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
  at::Tensor c = at::empty({n, n}, options);
  sync(device);
  const double t = best_time(3, [&] {
    for (int i = 0; i < reps; ++i) at::mm_out(c, a, b);
    sync(device);
  });
  return reps * 2.0 * n * n * n / t / 1e9;
}

// Every tokens/s figure is the best of this many runs (sampled and greedy alternated): on a
// shared VM single runs of the same configuration differ by up to 10-15%, and the roofline it is
// compared with is a best-of too.
constexpr int kRepeats = 3;

struct Result {
  double tokens_per_s;
  double bound_tokens_per_s;
  const char* limiter;
  double step_bytes;  // Roofline::step_bytes
};

constexpr int64_t kPrompt = 16;

// An engine holding `batch` requests of a `prompt`-token prompt and steps + 2 new tokens each:
// greedy, or with `sampled` temperature 1 and top-p 0.9 (what RL rollouts run).
std::unique_ptr<flywheel::rollout::GenerationEngine> decode_engine(
    std::shared_ptr<flywheel::model::DecoderModel> model, int64_t batch, int64_t steps,
    bool sampled, int64_t prompt = kPrompt) {
  const ModelConfig& c = model->config();
  flywheel::rollout::EngineOptions options;
  options.max_slots = batch;
  options.max_seq_len = prompt + steps + 4;
  auto engine = *flywheel::rollout::GenerationEngine::create(model, options);
  for (int64_t b = 0; b < batch; ++b) {
    flywheel::rollout::GenerationRequest r;
    r.id = std::to_string(b);
    for (int64_t t = 0; t < prompt; ++t) r.prompt_ids.push_back((b * 31 + t * 7) % c.vocab_size);
    r.sampling.temperature = sampled ? 1.0 : 0.0;
    r.sampling.top_p = sampled ? 0.9 : 1.0;
    r.sampling.seed = static_cast<uint64_t>(b);
    r.sampling.max_new_tokens = steps + 2;
    (void)engine->submit(r);
  }
  return engine;
}

struct Roofline {
  double tokens_per_s;
  const char* limiter;    // "memory" or "compute"
  double step_bytes = 0;  // what one decode step reads: weights (experts picked) + KV cache
};

// Mixture of experts: the fraction of the experts one decode step of `batch` rows reads, measured
// by routing `batch` tokens through the model (the experts some token of a layer picked, over
// every layer's experts); 1 for dense models.
double experts_read(const flywheel::model::DecoderModel& model, int64_t batch) {
  const ModelConfig& c = model.config();
  if (c.num_moe_layers() == 0) return 1.0;
  flywheel::model::ForwardBatch b;
  b.tokens = (at::arange(batch, at::kLong) * 7919 + 13).remainder(c.vocab_size).view({batch, 1});
  b.positions = at::zeros({batch, 1}, at::kLong);
  flywheel::model::RouteRecord record;
  at::NoGradGuard no_grad;
  model.forward(b, nullptr, &record);
  double used = 0;
  for (const at::Tensor& layer : record.layers) {
    const at::Tensor picked = at::zeros({c.num_experts}, at::kLong);
    picked.index_fill_(0, layer.reshape({-1}), 1);
    used += static_cast<double>(picked.sum().item<int64_t>());
  }
  return used / static_cast<double>(record.layers.size() * c.num_experts);
}

// The roofline of one decode step of `batch` rows at `context` tokens each: max(bytes / bandwidth,
// FLOPs / peak), bytes = the weights + the KV cache read. A mixture of experts reads only the
// experts its tokens picked (experts_read) and computes num_experts_per_tok of them per token.
Roofline decode_roofline(const flywheel::model::DecoderModel& model, int64_t batch, double context,
                         double bandwidth_gbs, double peak_gflops) {
  const ModelConfig& c = model.config();
  const double element = model.options().dtype == at::kFloat ? 4.0 : 2.0;
  const double expert = 3.0 * c.hidden_size * c.moe_intermediate_size;  // one expert's weights
  const double all_experts = c.num_moe_layers() * c.num_experts * expert;
  const double params = static_cast<double>(c.num_parameters()) - all_experts;  // dense part
  const double kv_bytes =
      batch * context * c.num_hidden_layers * 2.0 * c.num_key_value_heads * c.head_dim * element;
  const double step_bytes =
      (params + all_experts * experts_read(model, batch)) * element + kv_bytes;
  const double embed = c.vocab_size * c.hidden_size;  // the lookup reads one row, lm_head all
  const double active = params + c.num_moe_layers() * c.num_experts_per_tok * expert;
  const double step_flops =
      batch * (2.0 * (active - embed) + 2.0 * embed +
               c.num_hidden_layers * 4.0 * c.num_attention_heads * c.head_dim * context);
  const double memory_time = step_bytes / (bandwidth_gbs * 1e9);
  const double compute_time = step_flops / (peak_gflops * 1e9);
  return {batch / std::max(memory_time, compute_time),
          memory_time >= compute_time ? "memory" : "compute", step_bytes};
}

// Decode tokens/s of `batch` rows over `steps` steps, beside the roofline of a step.
Result run(std::shared_ptr<flywheel::model::DecoderModel> model, int64_t batch, int64_t steps,
           double bandwidth_gbs, double peak_gflops, bool sampled = false) {
  auto engine = decode_engine(model, batch, steps, sampled);
  const at::Device device = model->options().device;
  engine->step();  // prefill + first decode
  engine->step();  // warm-up decode
  const int64_t before = engine->stats().generated_tokens;
  sync(device);
  auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) engine->step();
  sync(device);
  const double elapsed = seconds_since(start);
  const double tokens_per_s = (engine->stats().generated_tokens - before) / elapsed;

  const Roofline roof =
      decode_roofline(*model, batch, kPrompt + 2 + steps / 2.0, bandwidth_gbs, peak_gflops);
  return {tokens_per_s, roof.tokens_per_s, roof.limiter, roof.step_bytes};
}

// The engine's pause for one weight update in the middle of generation (rollout.weight_update:
// in_flight): update_weights() (the staged copy of every tensor, or with `adapters_only` of the
// LoRA adapters) plus the extra time of the step that applies it (and merges merged adapters),
// beside a normal decode step.
void report_update_pause(std::shared_ptr<flywheel::model::DecoderModel> model, int64_t batch,
                         int64_t steps, bool adapters_only = false) {
  const ModelConfig& c = model->config();
  flywheel::rollout::EngineOptions options;
  options.max_slots = batch;
  options.max_seq_len = 16 + steps + 16;
  auto engine = *flywheel::rollout::GenerationEngine::create(model, options);
  for (int64_t b = 0; b < batch; ++b) {
    flywheel::rollout::GenerationRequest r;
    r.id = std::to_string(b);
    for (int64_t t = 0; t < 16; ++t) r.prompt_ids.push_back((b * 31 + t * 7) % c.vocab_size);
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = steps + 12;
    (void)engine->submit(r);
  }
  const at::Device device = model->options().device;
  engine->step();
  engine->step();
  sync(device);
  auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) engine->step();
  sync(device);
  const double step_s = seconds_since(start) / steps;
  std::vector<std::pair<std::string, at::Tensor>> weights;
  double bytes = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    if (adapters_only && !flywheel::model::is_lora_name(name)) continue;
    weights.emplace_back(name, p.clone());
    bytes += static_cast<double>(p.numel() * p.element_size());
  }
  sync(device);
  start = Clock::now();
  absl::Status staged = engine->update_weights(weights, engine->version() + 1);
  sync(device);
  const double stage_s = seconds_since(start);
  start = Clock::now();
  engine->step();  // applies the update, then decodes
  sync(device);
  const double apply_step_s = seconds_since(start);
  if (!staged.ok() || engine->version() != 1) {
    std::printf("weight update failed: %s\n", std::string(staged.message()).c_str());
    return;
  }
  std::printf(
      "%sweight update in flight (%s%.1f MB, batch %lld): update_weights() %.1f ms, the step that "
      "applies it %.1f ms vs %.1f ms per decode step: the engine pauses %.1f ms\n",
      adapters_only ? "" : "\n",
      adapters_only ? (model->options().lora.merged ? "LoRA adapters, merged: "
                                                    : "LoRA adapters, "
                                                      "unmerged: ")
                    : "",
      bytes / 1e6, static_cast<long long>(batch), 1e3 * stage_s, 1e3 * apply_step_s, 1e3 * step_s,
      1e3 * (stage_s + std::max(0.0, apply_step_s - step_s)));
}

// RL prompts and responses run to hundreds or thousands of tokens: the prefill of 8 prompts of
// 1024 tokens (prompt tokens/s beside the compute roofline: the projections' FLOPs, lm_head for
// the last token, and causal attention's), then decode at that context (tokens/s beside the
// roofline with the KV cache read every step).
void report_long_context(std::shared_ptr<flywheel::model::DecoderModel> model, double bandwidth_gbs,
                         double peak_gflops) {
  const ModelConfig& c = model->config();
  const int64_t batch = 8, prompt = 1024, steps = 16;
  auto engine = decode_engine(model, batch, steps + 2, false, prompt);
  const at::Device device = model->options().device;
  sync(device);
  auto start = Clock::now();
  engine->step();  // prefill + first decode
  sync(device);
  const double prefill_s = seconds_since(start);
  const double embed = c.vocab_size * c.hidden_size;
  const double tokens = static_cast<double>(batch * prompt);
  const double prefill_flops = tokens * 2.0 * (c.num_parameters() - embed) + batch * 2.0 * embed +
                               c.num_hidden_layers * 4.0 * c.num_attention_heads * c.head_dim *
                                   batch * prompt * (prompt + 1) / 2.0;
  engine->step();  // warm-up decode
  const int64_t before = engine->stats().generated_tokens;
  sync(device);
  start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) engine->step();
  sync(device);
  const double decode_tokens_per_s =
      (engine->stats().generated_tokens - before) / seconds_since(start);
  const Roofline roof =
      decode_roofline(*model, batch, prompt + 2 + steps / 2.0, bandwidth_gbs, peak_gflops);
  std::printf(
      "\nlong context, 100M, batch 8, prompts of %lld tokens: prefill %.0f prompt tokens/s (%.1f "
      "GFLOP/s, %.1f%% of the compute roofline); decode %.1f tokens/s, %.1f%% of its roofline "
      "%.1f (%s-bound, KV cache included)\n",
      static_cast<long long>(prompt), tokens / prefill_s, prefill_flops / prefill_s / 1e9,
      100 * prefill_flops / prefill_s / 1e9 / peak_gflops, decode_tokens_per_s,
      100 * decode_tokens_per_s / roof.tokens_per_s, roof.tokens_per_s, roof.limiter);
}

// Mean entropy (nats) of the next-token distribution at the end of the bench's prompts.
double mean_next_token_entropy(const flywheel::model::DecoderModel& model) {
  const int64_t rows = 8, prompt = 16, vocab = model.config().vocab_size;
  at::Tensor tokens = at::empty({rows, prompt}, at::kLong);
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t t = 0; t < prompt; ++t) tokens[b][t] = (b * 31 + t * 7) % vocab;
  }
  flywheel::model::ForwardBatch batch;
  batch.tokens = tokens;
  batch.positions = at::arange(prompt, at::kLong).expand({rows, prompt}).contiguous();
  at::NoGradGuard no_grad;
  at::Tensor logits = model.logits(model.forward(batch).select(1, prompt - 1));
  at::Tensor logp = at::log_softmax(logits, -1);
  return -(logp.exp() * logp).sum(-1).mean().item<double>();
}

// One side of an interleaved comparison: how to build its engine, and what to apply before each
// of its steps (its thread layout), if anything.
struct Contender {
  std::function<std::unique_ptr<flywheel::rollout::GenerationEngine>()> engine;
  std::function<void()> before_step = [] {};
};

// The decode tokens/s of two contenders, their steps interleaved one by one (in alternating
// order) over `rounds` fresh pairs of engines: both see the same machine, step for step, which
// best-of runs on a VM that drifts by 10-25% between runs do not give.
std::array<double, 2> interleaved_tokens_per_s(const Contender (&sides)[2], int64_t steps,
                                               int rounds, const at::Device& device) {
  double seconds[2] = {0, 0}, tokens[2] = {0, 0};
  for (int round = 0; round < rounds; ++round) {
    std::unique_ptr<flywheel::rollout::GenerationEngine> engines[2];
    for (int i = 0; i < 2; ++i) {
      sides[i].before_step();
      engines[i] = sides[i].engine();
      engines[i]->step();  // prefill + first decode
      engines[i]->step();  // warm-up decode
      tokens[i] -= engines[i]->stats().generated_tokens;
    }
    for (int64_t s = 0; s < steps; ++s) {
      for (int k = 0; k < 2; ++k) {
        const int i = (s + k) % 2;
        sides[i].before_step();
        sync(device);
        const auto start = Clock::now();
        engines[i]->step();
        sync(device);
        seconds[i] += seconds_since(start);
      }
    }
    for (int i = 0; i < 2; ++i) tokens[i] += engines[i]->stats().generated_tokens;
  }
  return {tokens[0] / seconds[0], tokens[1] / seconds[1]};
}

// A greedy contender at `batch` on `model`, under the thread layout `args` gives `dtype`.
Contender layout_contender(std::shared_ptr<flywheel::model::DecoderModel> model, int64_t batch,
                           int64_t steps, const flywheel::bench::BenchArgs& args,
                           at::ScalarType dtype) {
  return {[=] { return decode_engine(model, batch, steps, false); },
          [=] { (void)flywheel::bench::apply_bench_threads(args, dtype); }};
}

// LoRA adapters of rank 16 on every projection (trainer.lora) in the engine: merged into the
// weights once per version against unmerged (two small extra projections per adapted one in
// every step), decode tokens/s at batch 1, 8 and 64 with steps interleaved, beside the merged
// model's roofline; then the pause of an adapters-only update on each.
void report_lora(const ModelConfig& config, at::ScalarType dtype, const at::Device& device,
                 int budget, int64_t steps, double bandwidth_gbs, double peak_gflops) {
  std::shared_ptr<flywheel::model::DecoderModel> models[2];  // merged, unmerged
  int64_t adapter_params = 0;
  for (int i = 0; i < 2; ++i) {
    flywheel::model::DecoderOptions options{dtype, device, budget};
    options.lora.rank = 16;
    options.lora.alpha = 32;
    options.lora.targets = flywheel::model::lora_target_modules();
    options.lora.merged = i == 0;
    auto created = flywheel::model::DecoderModel::create(config, options);
    if (!created.ok()) {
      std::printf("lora: %s\n", std::string(created.status().message()).c_str());
      return;
    }
    models[i].reset(created->release());
    models[i]->init_random(1);
    at::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(2);
    adapter_params = 0;
    for (const auto& [name, p] : models[i]->named_parameters()) {  // trained adapters: B != 0
      if (!flywheel::model::is_lora_name(name)) continue;
      const_cast<at::Tensor&>(p).copy_(at::empty(p.sizes(), at::kFloat).normal_(0, 0.02, gen));
      adapter_params += p.numel();
    }
    models[i]->merge_adapters();
  }
  std::printf(
      "\nLoRA rank 16 on every projection (%.2fM adapter parameters, %.2f%% of the "
      "model), merged vs unmerged in the engine, steps interleaved:\n",
      adapter_params / 1e6, 100.0 * adapter_params / config.num_parameters());
  for (int64_t batch : {1, 8, 64}) {
    const Contender sides[2] = {{[=] { return decode_engine(models[0], batch, steps, false); }},
                                {[=] { return decode_engine(models[1], batch, steps, false); }}};
    const std::array<double, 2> tps = interleaved_tokens_per_s(sides, steps, kRepeats, device);
    const Roofline roof =
        decode_roofline(*models[0], batch, kPrompt + 2 + steps / 2.0, bandwidth_gbs, peak_gflops);
    std::printf(
        "  batch %2lld: merged %8.1f tokens/s, unmerged %8.1f (merged %.2fx); roofline "
        "%.1f (%s-bound): merged %.1f%%\n",
        static_cast<long long>(batch), tps[0], tps[1], tps[0] / tps[1], roof.tokens_per_s,
        roof.limiter, 100 * tps[0] / roof.tokens_per_s);
  }
  for (const auto& model : models) report_update_pause(model, 32, 8, /*adapters_only=*/true);
}

// Sampled against greedy decode at batch 64, first on the random weights (a near-flat next-token
// distribution: top-p 0.9 keeps most of the vocabulary), then with the final norm scaled until
// the mean entropy is below 3 nats, as a trained model's is (top-p keeps a few hundred tokens).
void report_sampled(std::shared_ptr<flywheel::model::DecoderModel> model, int64_t steps) {
  at::Tensor norm;
  for (const auto& [name, p] : model->named_parameters()) {
    if (name == "model.norm.weight") norm = p;
  }
  for (const char* kind : {"random weights", "peaked logits"}) {
    if (std::string(kind) == "peaked logits") {
      at::NoGradGuard no_grad;
      for (int i = 0; i < 12 && mean_next_token_entropy(*model) > 3.0; ++i) norm.mul_(2.0);
    }
    const double entropy = mean_next_token_entropy(*model);
    const Contender sides[2] = {{[&] { return decode_engine(model, 64, steps, false); }},
                                {[&] { return decode_engine(model, 64, steps, true); }}};
    const auto [greedy, sampled] =
        interleaved_tokens_per_s(sides, steps, kRepeats, model->options().device);
    std::printf(
        "sampled decode (temperature 1, top-p 0.9), 100M, batch 64, %s (next-token entropy %.2f "
        "nats): %.1f tokens/s, %.1f%% of greedy's %.1f tokens/s in the same run (%d x %lld "
        "steps each, interleaved step by step)\n",
        kind, entropy, sampled, 100 * sampled / greedy, greedy, kRepeats,
        static_cast<long long>(steps));
  }
}

// Batch-1 decode on one thread against the whole budget, each with its own thread layout and
// model (the float32 kernels' threads are the model's), steps interleaved, beside the memory
// bandwidth each thread count reaches: batch 1 is bandwidth-bound, so that ratio bounds the
// speed-up.
void report_thread_scaling(const ModelConfig& config, at::ScalarType dtype,
                           const flywheel::bench::BenchArgs& args, int budget, int64_t steps) {
  double bandwidth[2] = {0, 0};
  const int threads[2] = {1, budget};
  std::shared_ptr<flywheel::model::DecoderModel> models[2];
  flywheel::bench::BenchArgs at_count[2] = {args, args};
  for (int i = 0; i < 2; ++i) {
    at_count[i].threads = threads[i];
    (void)flywheel::bench::apply_bench_threads(at_count[i], dtype);
    auto created = flywheel::model::DecoderModel::create(
        config, flywheel::model::DecoderOptions{dtype, at::kCPU, threads[i]});
    models[i].reset(created->release());
    models[i]->init_random(1);
    bandwidth[i] = memory_bandwidth_gbs(threads[i]);
  }
  const Contender sides[2] = {layout_contender(models[0], 1, steps, at_count[0], dtype),
                              layout_contender(models[1], 1, steps, at_count[1], dtype)};
  const std::array<double, 2> tokens =
      interleaved_tokens_per_s(sides, steps, kRepeats, at::Device(at::kCPU));
  std::printf(
      "\nbatch 1, 1 thread vs %d threads: %.1f vs %.1f tokens/s = %.2fx; memory read %.1f vs "
      "%.1f GB/s = %.2fx in the same run (batch 1 is bandwidth-bound: the ratio it allows; %d x "
      "%lld steps each, interleaved step by step)\n",
      budget, tokens[0], tokens[1], tokens[1] / tokens[0], bandwidth[0], bandwidth[1],
      bandwidth[1] / bandwidth[0], kRepeats, static_cast<long long>(steps));
}

// bfloat16 against float32 decode at batch 64 on a CPU with native bf16: one model of each dtype
// (same random weights), each under its own thread layout (applied before each of its steps),
// steps interleaved so that both see the same machine.
void report_dtype_ratio(const ModelConfig& config, const flywheel::bench::BenchArgs& args,
                        int budget, int64_t steps) {
  const at::ScalarType dtypes[2] = {at::kFloat, at::kBFloat16};
  std::shared_ptr<flywheel::model::DecoderModel> models[2];
  for (int i = 0; i < 2; ++i) {
    auto created = flywheel::model::DecoderModel::create(
        config, flywheel::model::DecoderOptions{dtypes[i], at::kCPU, budget});
    models[i].reset(created->release());
    models[i]->init_random(1);
  }
  const Contender sides[2] = {layout_contender(models[0], 64, steps, args, dtypes[0]),
                              layout_contender(models[1], 64, steps, args, dtypes[1])};
  const std::array<double, 2> tokens =
      interleaved_tokens_per_s(sides, steps, kRepeats, at::Device(at::kCPU));
  std::printf(
      "\nbfloat16 vs float32, 100M, batch 64 (native bf16): %.1f vs %.1f tokens/s = %.2fx in the "
      "same run (%d x %lld steps each, interleaved step by step; %s)\n",
      tokens[1], tokens[0], tokens[1] / tokens[0], kRepeats, static_cast<long long>(steps),
      flywheel::bench::apply_bench_threads(args, dtypes[1]).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  const flywheel::bench::BenchArgs args = flywheel::bench::parse_bench_args(argc, argv);
  const int64_t steps = args.steps;
  if (args.device != "cpu" && args.device != "cuda") {
    std::fprintf(stderr, "rollout_bench: --device: expected cpu or cuda, got %s\n%s",
                 args.device.c_str(), kUsage);
    return 2;
  }
  const bool on_cuda = args.device == "cuda";
  // As `flywheel rollout` and `generate` set up their processes.
  flywheel::model::use_huge_pages_for_large_cpu_tensors();
  flywheel::model::keep_freed_cpu_memory_for_reuse();
  if (on_cuda && !torch::cuda::is_available()) {
    std::fprintf(stderr,
                 "rollout_bench: --device cuda: no CUDA device (this LibTorch was built without "
                 "CUDA, or no GPU is visible)\n");
    return 2;
  }
  const at::Device device = on_cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const flywheel::model::CpuFeatures cpu = flywheel::model::detect_cpu_features();
  // On the GPU the default is bfloat16 (float32 there only when asked for).
  const std::string dtype_arg = on_cuda && !args.dtype_given ? "bfloat16" : args.dtype;
  auto dtype = flywheel::model::resolve_dtype(dtype_arg, on_cuda, cpu.native_bf16);
  if (!dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  const std::string dtype_name = flywheel::model::dtype_name(*dtype);
  const int budget = flywheel::bench::bench_budget(args);
  at::NoGradGuard no_grad;
  // LibTorch's peak on the whole budget, before the bench's layout (which may give ATen and BLAS
  // one thread each) is applied.
  const double blas_peak = on_cuda ? device_matmul_gflops(*dtype, device)
                                   : flywheel::bench::libtorch_matmul_gflops(*dtype, budget);
  const std::string layout = flywheel::bench::apply_bench_threads(args, *dtype);
  const double bandwidth =
      on_cuda ? device_copy_bandwidth_gbs(device) : memory_bandwidth_gbs(budget);
  // Decode runs its projections in flywheel's kernels where the CPU has them for the dtype: the
  // peak is the faster of the two.
  const bool kernels = !on_cuda && flywheel::model::small_gemm_supports(*dtype);
  flywheel::model::WorkerPool peak_pool(budget);
  const double kernel_peak =
      kernels ? flywheel::bench::kernel_matmul_gflops(&peak_pool, *dtype) : 0;
  const double peak = std::max(blas_peak, kernel_peak);
  std::printf("rollout_bench: greedy decode through the engine, %s on %s, %lld steps\n",
              dtype_name.c_str(), device.str().c_str(), static_cast<long long>(steps));
  std::printf("cpu: %s\n%s\n", flywheel::model::describe(cpu).c_str(), layout.c_str());
  if (on_cuda) {
    std::printf(
        "device (measured in this run): memory %.1f GB/s (1 GiB device-to-device copy, read + "
        "written), %s matmul %.1f TFLOP/s (8192^3)\n",
        bandwidth, dtype_name.c_str(), peak / 1e3);
  } else {
    std::printf(
        "machine (measured in this run): memory read %.1f GB/s (%d threads), %s matmul %.1f "
        "GFLOP/s (LibTorch, 1024^3)",
        bandwidth, budget, dtype_name.c_str(), blas_peak);
    if (kernels) {
      std::printf(", flywheel kernels (%s) %.1f GFLOP/s (1024^3)",
                  *dtype == at::kBFloat16
                      ? "avx512 bf16"
                      : flywheel::model::gemm_isa_name(flywheel::model::detect_gemm_isa()),
                  kernel_peak);
    }
    std::printf("; compute roofline %.1f GFLOP/s\n", peak);
  }
  std::printf(
      "roofline per decode step: max(bytes / bandwidth, FLOPs / matmul peak), bytes = weights + "
      "KV cache read\n\n");
  std::printf("%-8s %8s %6s %12s %14s %9s %9s   %s\n", "model", "params", "batch", "tokens/s",
              "roofline tok/s", "limit", "fraction", "vs batch 1 (roofline allows)");
  struct Spec {
    const char* name;
    ModelConfig config;
  };
  // moe: Qwen3-MoE of 16 experts (2 per token) of width 512 in each of 8 layers, ~110M
  // parameters of which ~30M are active per token.
  std::vector<Spec> specs = {
      {"small", qwen2_config(4096, 256, 768, 4, 4, 2)},
      {"100M", qwen2_config(32000, 768, 2048, 12, 12, 4)},
      {"moe", flywheel::bench::qwen3_moe_config(32000, 512, 8, 8, 4, 16, 2, 512)}};
  for (const Spec& spec : specs) {
    if (!flywheel::bench::listed(args.models, spec.name)) continue;
    auto created = flywheel::model::DecoderModel::create(
        spec.config, flywheel::model::DecoderOptions{*dtype, device, budget});
    if (!created.ok()) {
      std::fprintf(stderr, "%s\n", std::string(created.status().message()).c_str());
      return 1;
    }
    std::shared_ptr<flywheel::model::DecoderModel> model(created->release());
    model->init_random(1);
    double batch1 = 0, batch1_bound = 0;
    for (int64_t batch : {1, 8, 32, 64}) {
      if (!flywheel::bench::listed(args.batches, std::to_string(batch))) continue;
      Result r = run(model, batch, steps, bandwidth, peak);
      for (int i = 1; i < kRepeats; ++i) {
        r.tokens_per_s =
            std::max(r.tokens_per_s, run(model, batch, steps, bandwidth, peak).tokens_per_s);
      }
      if (batch == 1) {
        batch1 = r.tokens_per_s;
        batch1_bound = r.bound_tokens_per_s;
      }
      std::printf("%-8s %7.1fM %6lld %12.1f %14.1f %9s %8.1f%%", spec.name,
                  spec.config.num_parameters() / 1e6, static_cast<long long>(batch), r.tokens_per_s,
                  r.bound_tokens_per_s, r.limiter, 100 * r.tokens_per_s / r.bound_tokens_per_s);
      if (batch > 1 && batch1 > 0) {
        std::printf("   %.1fx (%.1fx)", r.tokens_per_s / batch1,
                    r.bound_tokens_per_s / batch1_bound);
      }
      if (batch == 1) {  // one token per step: the step's bytes at the rate steps run
        std::printf("   reads %.1f GB/s of the measured %.1f", r.tokens_per_s * r.step_bytes / 1e9,
                    bandwidth);
      }
      std::printf("\n");
    }
    if (std::string(spec.name) == "100M" && !args.no_extras) {
      if (!on_cuda && budget > 1) {
        report_thread_scaling(spec.config, *dtype, args, budget, steps);
        (void)flywheel::bench::apply_bench_threads(args, *dtype);
      }
      if (!on_cuda && cpu.native_bf16) {
        report_dtype_ratio(spec.config, args, budget, steps);
        (void)flywheel::bench::apply_bench_threads(args, *dtype);
      }
      report_update_pause(model, 32, 8);
      report_lora(spec.config, *dtype, device, budget, steps, bandwidth, peak);
      report_long_context(model, bandwidth, peak);
      flywheel::bench::report_multi_turn(model, kRepeats);
      report_sampled(model, steps);  // last: it rescales the final norm
    }
  }
  return 0;
}
