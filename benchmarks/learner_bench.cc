// learner_bench: training throughput of the sharded learner (forward, backward, AdamW) on a
// 100M-parameter Qwen2-shaped model, float32 and bfloat16, on 1 and 2 ranks of --threads threads
// each (1), beside the matmul FLOP/s of the same dtype measured in the same run.
//
//   build/benchmarks/learner_bench [--steps 3] [--tokens 512] [--threads 1]
//       [--thread-split none|auto|blas|aten] [--dtypes float32,bfloat16] [--ranks 1,2]
//   build/benchmarks/learner_bench --prompt 1024 --response 128 --group 8 [--steps 1]
//   build/benchmarks/learner_bench --profile 1 [--dtypes ...] [--steps 3] [--reshard 1]
//       [--prompt P --response R --group G --shared 0|1]
//   build/benchmarks/learner_bench --proximal 1 [--dtypes ...] [--tokens 2048] [--prompt ...]
//
// With --proximal 1, the RL learner's proximal pass instead (a forward without gradients over
// the step's packed micro-batches, log-probs of every position): LibTorch's kernels against the
// rollout engine's (trainer.exact_logprobs), one rank, tokens/s of each.
//
// With --prompt, the shared-prefix rows instead (trainer.shared_prefix): one rank trains a group
// of --group samples of one --prompt-token prompt and --response tokens each, unshared and
// shared, and prints tokens/s of both (every sample's prompt and response tokens counted, the
// same numerator for both) and their ratio. With --profile 1, one rank per dtype and where its
// steps' time goes (op_profile.h: forward / backward by kind, optimizer, collectives, the rest).
//
// --threads T runs T threads per rank; --thread-split none sets ATen to T and leaves BLAS at
// OPENBLAS_NUM_THREADS=T (what `flywheel train` gives its learners), the others apply that
// model::ThreadLayout.
// The driver measures the matmul peaks, then runs itself under `mpiexec -np 1` and `-np 2`
// (--worker) and prints one line per configuration. Achieved FLOP/s counts 6 x parameters x
// tokens plus attention (3 x the forward's causal QK^T and PV), as is usual; with
// reshard_after_forward the recomputed forward is extra work not counted.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/cpu/kernel_linear.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/cpu/thread_layout.h"
#include "flywheel/trainer/micro_batch.h"
#include "flywheel/trainer/sft_trainer.h"
#include "op_profile.h"

namespace {

using flywheel::bench::Clock;
using flywheel::bench::seconds_since;

constexpr int64_t kSequence = 256;  // tokens per sequence; sequences are packed per micro-batch

flywheel::model::ModelConfig bench_config() {
  return flywheel::bench::qwen2_config(32000, 768, 2048, 12, 12, 4);
}

double flops_per_token(const flywheel::model::ModelConfig& c) {
  // Causal attention over sequences of kSequence: each token reads (kSequence + 1) / 2 keys on
  // average; QK^T and PV are 2 multiply-adds per key and head dimension, forward and backward 3x.
  const double attention = 3.0 * 2 * 2 * c.num_hidden_layers * c.num_attention_heads * c.head_dim *
                           (kSequence + 1) / 2.0;
  return 6.0 * c.num_parameters() + attention;
}

// The matmul peak of a `dtype` learner, given LibTorch's (`libtorch_peak`): for bfloat16 on CPUs
// where the learner's products run in model::kernel_linear (flywheel's kernels, or float32 BLAS on
// widened copies), the higher of that and kernel_linear's 1024^3 rate on the learner's thread.
// `source` says which it is.
double learner_peak(at::ScalarType dtype, double libtorch_peak, std::string* source) {
  *source = "LibTorch";
  if (dtype != at::kBFloat16 || !flywheel::model::bf16_projections_in_kernels()) {
    return libtorch_peak;
  }
  const int64_t n = 1024;
  const at::Tensor x = at::randn({n, n}).to(dtype), w = at::randn({n, n}).to(dtype);
  const double t = flywheel::bench::best_time(5, [&] { flywheel::model::kernel_linear(x, w); });
  const double ours = 2.0 * n * n * n / t / 1e9;
  char text[96];
  std::snprintf(text, sizeof(text), "%s; LibTorch %.1f, kernel_linear %.1f",
                ours > libtorch_peak ? "kernel_linear" : "LibTorch", libtorch_peak, ours);
  *source = text;
  return std::max(ours, libtorch_peak);
}

// One measured configuration: what run_worker passes to the --worker process.
struct WorkerArgs {
  std::string dtype = "float32";
  bool reshard = true;
  int steps = 3;
  int64_t tokens = 512;  // per rank per step; micro_batch_tokens in the shared-prefix rows
  int threads = 1;
  std::string split = "none";
  // Shared-prefix rows (--prompt > 0): one group of `group` samples of a `prompt`-token prompt
  // and `response` tokens each, trained with trainer.shared_prefix `shared`.
  int64_t prompt = 0, response = 0, group = 0;
  bool shared = false;
  bool profile = false;  // rank 0 prints an OpProfile table of the timed steps
  // --proximal: time the no-grad log-prob pass, in the engine's kernels (`engine`) or LibTorch's.
  bool proximal = false, engine = false;

  std::string flags() const {
    return " --dtype " + dtype + " --reshard " + (reshard ? "1" : "0") + " --steps " +
           std::to_string(steps) + " --tokens " + std::to_string(tokens) + " --threads " +
           std::to_string(threads) + " --thread-split " + split + " --prompt " +
           std::to_string(prompt) + " --response " + std::to_string(response) + " --group " +
           std::to_string(group) + " --shared " + (shared ? "1" : "0") + " --profile " +
           (profile ? "1" : "0") + " --proximal " + (proximal ? "1" : "0") + " --engine " +
           (engine ? "1" : "0");
  }
};

// The examples of one rank's step: sequences of a 1-token prompt and kSequence - 1 tokens, or
// with args.prompt one group sharing its prompt.
std::vector<flywheel::trainer::SftExample> bench_examples(const WorkerArgs& args) {
  std::vector<flywheel::trainer::SftExample> examples;
  if (args.prompt > 0) {
    std::vector<int32_t> prompt;
    for (int64_t t = 0; t < args.prompt; ++t)
      prompt.push_back(static_cast<int32_t>(t * 13 % 32000));
    for (int64_t g = 0; g < args.group; ++g) {
      flywheel::trainer::SftExample e;
      e.prompt = prompt;
      for (int64_t t = 0; t < args.response; ++t) {
        e.response.push_back(static_cast<int32_t>((g * 131 + t * 7) % 32000));
      }
      examples.push_back(std::move(e));
    }
    return examples;
  }
  examples.resize(args.tokens / kSequence);
  for (size_t i = 0; i < examples.size(); ++i) {
    examples[i].prompt = {static_cast<int32_t>(i % 1000)};
    for (int64_t t = 0; t < kSequence; ++t) {
      examples[i].response.push_back(static_cast<int32_t>((i * 31 + t * 7) % 32000));
    }
  }
  return examples;
}

// --proximal: times the no-grad log-prob pass over `examples`' micro-batches; prints "RESULT
// <tokens/s>" (every example's prompt and response tokens).
int proximal_pass(flywheel::comm::Communicator& world, flywheel::trainer::ShardedDecoder& model,
                  const std::vector<flywheel::trainer::SftExample>& examples,
                  const WorkerArgs& args) {
  std::vector<flywheel::trainer::SequenceTokens> sequences;
  flywheel::trainer::PackOptions pack;
  pack.max_tokens = args.tokens;
  pack.shared_prefix = args.shared;
  int64_t tokens = 0;
  for (const auto& e : examples) {
    sequences.push_back({&e.prompt, &e.response});
    pack.max_response = std::max<int64_t>(pack.max_response, e.response.size());
    tokens += static_cast<int64_t>(e.prompt.size() + e.response.size());
  }
  auto batches = flywheel::trainer::pack_micro_batches(sequences, pack);
  if (!batches.ok()) return 1;
  flywheel::trainer::HeadOptions head;
  head.engine_kernels = args.engine;
  at::NoGradGuard no_grad;
  auto pass = [&] {
    for (const auto& mb : *batches) model.forward(mb.batch, head);
  };
  pass();  // warm-up
  world.barrier();
  auto start = Clock::now();
  for (int s = 0; s < args.steps; ++s) pass();
  const double elapsed = seconds_since(start);
  if (world.rank() == 0) std::printf("RESULT %.3f\n", args.steps * tokens / elapsed);
  return 0;
}

// --worker: trains under MPI and prints "RESULT <tokens/s of all ranks>" on rank 0 (tokens of
// prompts and responses, each sample's own).
int worker(int argc, char** argv, const WorkerArgs& args) {
  flywheel::model::ThreadLayoutOptions layout;
  layout.threads = args.threads;
  layout.dtype = args.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  if (flywheel::model::parse_thread_split(args.split, &layout.split)) {
    flywheel::model::apply_thread_layout(layout);
  } else {
    at::set_num_threads(args.threads);
  }
  flywheel::model::use_huge_pages_for_large_cpu_tensors();
  flywheel::model::keep_freed_cpu_memory_for_reuse(flywheel::model::FreedMemoryReuse::kLearner);
  auto runtime = flywheel::comm::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) return 1;
  flywheel::comm::CommunicatorOptions world_options;
  world_options.name = "bench";
  world_options.timeout_s = 600;
  auto world = flywheel::comm::MpiCommunicator::world(**runtime, world_options);
  if (!world.ok()) return 1;
  flywheel::trainer::SftOptions options;
  options.micro_batch_tokens = args.tokens;
  options.shared_prefix = args.shared;
  options.lr.lr = 1e-5;
  options.sharding.param_dtype = layout.dtype;
  options.sharding.reshard_after_forward = args.reshard;
  auto sft = flywheel::trainer::SftTrainer::create(options, bench_config(), world->get());
  if (!sft.ok()) {
    std::fprintf(stderr, "%s\n", std::string(sft.status().message()).c_str());
    return 1;
  }
  (*sft)->model().init_random(1);
  const std::vector<flywheel::trainer::SftExample> examples = bench_examples(args);
  std::vector<const flywheel::trainer::SftExample*> mine;
  int64_t tokens = 0;
  for (const auto& e : examples) {
    mine.push_back(&e);
    tokens += static_cast<int64_t>(e.prompt.size() + e.response.size());
  }
  if (args.proximal) return proximal_pass(**world, (*sft)->model(), examples, args);
  if (!(*sft)->step(mine).ok()) return 1;  // warm-up
  (*world)->barrier();
  std::unique_ptr<flywheel::bench::OpProfile> profile;
  if (args.profile) profile = std::make_unique<flywheel::bench::OpProfile>();
  auto start = Clock::now();
  for (int s = 0; s < args.steps; ++s) {
    if (!(*sft)->step(mine).ok()) return 1;
  }
  (*world)->barrier();
  const double elapsed = seconds_since(start);
  if ((*world)->rank() == 0) {
    std::printf("RESULT %.3f\n", args.steps * tokens * (*world)->size() / elapsed);
    if (profile != nullptr) {
      std::istringstream table(profile->table());
      for (std::string line; std::getline(table, line);) std::printf("PROFILE %s\n", line.c_str());
    }
  }
  return 0;
}

// Runs the worker under mpiexec; its tokens/s, or 0 on failure. `profile`: the worker's
// OpProfile table lines (args.profile).
double run_worker(const char* self, int ranks, const WorkerArgs& args,
                  std::vector<std::string>* profile = nullptr) {
  const std::string command = std::string("mpiexec -np ") + std::to_string(ranks) +
                              " --oversubscribe " + self + " --worker" + args.flags();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 0;
  char line[512];
  double result = 0;
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    if (std::strncmp(line, "RESULT ", 7) == 0) result = std::atof(line + 7);
    if (profile != nullptr && std::strncmp(line, "PROFILE ", 8) == 0) profile->push_back(line + 8);
  }
  pclose(pipe);
  return result;
}

// --profile: one rank per dtype, where its step's time goes (OpProfile), beside the peak.
void profile_rows(const char* self, const WorkerArgs& base, const std::string& dtypes) {
  const flywheel::model::ModelConfig config = bench_config();
  for (const std::string d : {"float32", "bfloat16"}) {
    if (!flywheel::bench::listed(dtypes, d)) continue;
    const at::ScalarType dtype = d == "float32" ? at::kFloat : at::kBFloat16;
    std::string source;
    const double peak =
        learner_peak(dtype, flywheel::bench::libtorch_matmul_gflops(dtype, base.threads), &source);
    WorkerArgs args = base;
    args.dtype = d;
    args.profile = true;
    std::vector<std::string> table;
    const double tps = run_worker(self, 1, args, &table);
    // With --prompt, tokens/s counts every sample's prompt: FLOP/s count the positions computed.
    double computed = 1;
    if (args.prompt > 0) {
      const double P = static_cast<double>(args.prompt), R = static_cast<double>(args.response),
                   G = static_cast<double>(args.group);
      computed = (args.shared ? P - 1 + G * R : G * (P + R - 1)) / (G * (P + R));
    }
    const double gflops = tps * computed * flops_per_token(config) / 1e9;
    std::printf(
        "\n%s, 1 rank, reshard_after_forward=%d, %d thread(s): %.1f tokens/s, %.1f GFLOP/s = "
        "%.1f%% of the %s matmul peak (%.1f GFLOP/s, %s); where the %d profiled step(s) "
        "went:\n\n",
        d.c_str(), args.reshard, args.threads, tps, gflops, 100 * gflops / peak, d.c_str(), peak,
        source.c_str(), args.steps);
    for (const std::string& line : table) std::printf("%s", line.c_str());
    std::fflush(stdout);
  }
}

// --proximal rows: one rank, each dtype, LibTorch's kernels then the engine's.
void proximal_rows(const char* self, const WorkerArgs& base, const std::string& dtypes) {
  std::printf(
      "proximal pass (no gradients, log-probs of every position), 1 rank, %d thread(s), "
      "micro_batch_tokens %lld, %d timed pass(es)\n",
      base.threads, static_cast<long long>(base.tokens), base.steps);
  for (const std::string d : {"float32", "bfloat16"}) {
    if (!flywheel::bench::listed(dtypes, d)) continue;
    const at::ScalarType dtype = d == "float32" ? at::kFloat : at::kBFloat16;
    WorkerArgs args = base;
    args.dtype = d;
    args.proximal = true;
    args.engine = false;
    const double libtorch = run_worker(self, 1, args);
    if (!flywheel::model::small_gemm_supports(dtype)) {
      std::printf("%-8s LibTorch %7.1f tokens/s; the engine's kernels do not run %s on this CPU\n",
                  d.c_str(), libtorch, d.c_str());
      continue;
    }
    args.engine = true;
    const double engine = run_worker(self, 1, args);
    std::printf("%-8s LibTorch %7.1f tokens/s, engine kernels %7.1f tokens/s = %.2fx\n", d.c_str(),
                libtorch, engine, libtorch > 0 ? engine / libtorch : 0);
    std::fflush(stdout);
  }
}

// The shared-prefix rows: one rank, each dtype, unshared then shared.
void shared_prefix_rows(const char* self, const WorkerArgs& base, const std::string& dtypes) {
  std::printf(
      "shared-prefix rows: 1 rank, a group of %lld samples of a %lld-token prompt and %lld "
      "response tokens each, micro_batch_tokens %lld (%lld positions per step unshared, %lld "
      "shared), %d timed step(s)\n",
      static_cast<long long>(base.group), static_cast<long long>(base.prompt),
      static_cast<long long>(base.response), static_cast<long long>(base.tokens),
      static_cast<long long>(base.group * (base.prompt + base.response - 1)),
      static_cast<long long>(base.prompt - 1 + base.group * base.response), base.steps);
  for (const std::string d : {"float32", "bfloat16"}) {
    if (!flywheel::bench::listed(dtypes, d)) continue;
    WorkerArgs args = base;
    args.dtype = d;
    args.shared = false;
    const double unshared = run_worker(self, 1, args);
    args.shared = true;
    const double shared = run_worker(self, 1, args);
    std::printf(
        "%-8s prompt %lld / response %lld / group %lld: unshared %7.1f tokens/s, shared %7.1f "
        "tokens/s = %.2fx\n",
        d.c_str(), static_cast<long long>(base.prompt), static_cast<long long>(base.response),
        static_cast<long long>(base.group), unshared, shared, unshared > 0 ? shared / unshared : 0);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool is_worker = false;
  WorkerArgs args;
  std::string dtypes = "float32,bfloat16", rank_list = "1,2";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--worker")) is_worker = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--dtype")) args.dtype = argv[i + 1];
    if (!std::strcmp(argv[i], "--reshard")) args.reshard = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--steps")) args.steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) args.tokens = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) args.threads = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--thread-split")) args.split = argv[i + 1];
    if (!std::strcmp(argv[i], "--dtypes")) dtypes = argv[i + 1];
    if (!std::strcmp(argv[i], "--ranks")) rank_list = argv[i + 1];
    if (!std::strcmp(argv[i], "--prompt")) args.prompt = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--response")) args.response = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--group")) args.group = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--shared")) args.shared = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--profile")) args.profile = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--proximal")) args.proximal = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--engine")) args.engine = std::atoi(argv[i + 1]) != 0;
  }
  if (is_worker) return worker(argc, argv, args);

  setenv("OMP_NUM_THREADS", std::to_string(args.threads).c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", std::to_string(args.threads).c_str(), 1);
  if (getuid() == 0) {  // OpenMPI refuses root without these
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  if (args.prompt > 0) {
    args.response = std::max<int64_t>(args.response, 1);
    args.group = std::max<int64_t>(args.group, 1);
    // The whole tree in one micro-batch; unshared, one sequence per micro-batch or more.
    args.tokens = std::max(args.tokens, args.prompt - 1 + args.group * args.response);
  }
  if (args.proximal) {  // with --prompt: that group, shared as --shared says
    proximal_rows(argv[0], args, dtypes);
    return 0;
  }
  if (args.profile) {  // with --prompt: that group, shared as --shared says
    profile_rows(argv[0], args, dtypes);
    return 0;
  }
  if (args.prompt > 0) {
    shared_prefix_rows(argv[0], args, dtypes);
    return 0;
  }
  const flywheel::model::ModelConfig config = bench_config();
  std::printf(
      "learner_bench: %.1fM-parameter Qwen2-shaped model, %lld tokens per rank per step "
      "(sequences of %lld), %d timed steps, %d thread(s) per rank, --thread-split %s\n",
      config.num_parameters() / 1e6, static_cast<long long>(args.tokens),
      static_cast<long long>(kSequence), args.steps, args.threads, args.split.c_str());
  for (const std::string d : {"float32", "bfloat16"}) {
    if (!flywheel::bench::listed(dtypes, d)) continue;
    // The peak under the ranks' own layout; with --thread-split none (OpenBLAS at
    // OPENBLAS_NUM_THREADS, which this process sets too late for its own OpenBLAS) LibTorch's
    // peak on --threads threads.
    flywheel::model::ThreadLayoutOptions layout;
    layout.threads = args.threads;
    layout.dtype = d == "float32" ? at::kFloat : at::kBFloat16;
    double peak = 0;
    if (flywheel::model::parse_thread_split(args.split, &layout.split)) {
      flywheel::model::apply_thread_layout(layout);
      peak = flywheel::bench::matmul_gflops(layout.dtype);
    } else {
      peak = flywheel::bench::libtorch_matmul_gflops(layout.dtype, args.threads);
    }
    std::string source;
    peak = learner_peak(layout.dtype, peak, &source);
    double one = 0;
    for (int ranks : {1, 2}) {
      if (!flywheel::bench::listed(rank_list, std::to_string(ranks))) continue;
      for (bool r : {true, false}) {
        WorkerArgs run = args;
        run.dtype = d;
        run.reshard = r;
        const double tps = run_worker(argv[0], ranks, run);
        const double gflops = tps * flops_per_token(config) / 1e9 / ranks;  // per rank (core)
        if (ranks == 1 && r) one = tps;
        std::printf(
            "%-8s %d rank(s) reshard_after_forward=%d: %7.1f tokens/s, %6.1f GFLOP/s per rank = "
            "%5.1f%% of the %s matmul peak (%.1f GFLOP/s, %d thread(s), %s)%s\n",
            d.c_str(), ranks, r, tps, gflops, 100 * gflops / peak, d.c_str(), peak, args.threads,
            source.c_str(),
            ranks == 2 && r && one > 0
                ? (std::string(", ") + std::to_string(tps / one).substr(0, 4) + "x 1 rank").c_str()
                : "");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
