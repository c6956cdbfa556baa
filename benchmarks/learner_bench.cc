// learner_bench: training throughput of the sharded learner (forward, backward, AdamW) on a
// 100M-parameter Qwen2-shaped model, float32 and bfloat16, on 1 and 2 ranks of --threads threads
// each (1), beside the matmul FLOP/s of the same dtype measured in the same run.
//
//   build/benchmarks/learner_bench [--steps 3] [--tokens 512] [--threads 1]
//       [--thread-split none|auto|blas|aten] [--dtypes float32,bfloat16] [--ranks 1,2]
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
#include <string>
#include <vector>

#include "bench_util.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/cpu/thread_layout.h"
#include "flywheel/trainer/sft_trainer.h"

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

// --worker: trains under MPI and prints "RESULT <tokens/s of all ranks>" on rank 0.
int worker(int argc, char** argv, const std::string& dtype, bool reshard, int steps, int64_t tokens,
           int threads, const std::string& split) {
  flywheel::model::ThreadLayoutOptions layout;
  layout.threads = threads;
  layout.dtype = dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  if (flywheel::model::parse_thread_split(split, &layout.split)) {
    flywheel::model::apply_thread_layout(layout);
  } else {
    at::set_num_threads(threads);
  }
  flywheel::model::use_huge_pages_for_large_cpu_tensors();
  auto runtime = flywheel::comm::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) return 1;
  flywheel::comm::CommunicatorOptions world_options;
  world_options.name = "bench";
  world_options.timeout_s = 600;
  auto world = flywheel::comm::MpiCommunicator::world(**runtime, world_options);
  if (!world.ok()) return 1;
  flywheel::trainer::SftOptions options;
  options.micro_batch_tokens = tokens;
  options.lr.lr = 1e-5;
  options.sharding.param_dtype = dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  options.sharding.reshard_after_forward = reshard;
  auto sft = flywheel::trainer::SftTrainer::create(options, bench_config(), world->get());
  if (!sft.ok()) {
    std::fprintf(stderr, "%s\n", std::string(sft.status().message()).c_str());
    return 1;
  }
  (*sft)->model().init_random(1);
  // Each rank trains on `tokens` tokens per step: sequences of a 1-token prompt and the rest.
  std::vector<flywheel::trainer::SftExample> examples(tokens / kSequence);
  for (size_t i = 0; i < examples.size(); ++i) {
    examples[i].prompt = {static_cast<int32_t>(i % 1000)};
    for (int64_t t = 0; t < kSequence; ++t) {
      examples[i].response.push_back(static_cast<int32_t>((i * 31 + t * 7) % 32000));
    }
  }
  std::vector<const flywheel::trainer::SftExample*> mine;
  for (const auto& e : examples) mine.push_back(&e);
  if (!(*sft)->step(mine).ok()) return 1;  // warm-up
  (*world)->barrier();
  auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    if (!(*sft)->step(mine).ok()) return 1;
  }
  (*world)->barrier();
  const double elapsed = seconds_since(start);
  if ((*world)->rank() == 0) {
    std::printf("RESULT %.3f\n", steps * tokens * (*world)->size() / elapsed);
  }
  return 0;
}

// Runs the worker under mpiexec; its tokens/s, or 0 on failure.
double run_worker(const char* self, int ranks, const std::string& dtype, bool reshard, int steps,
                  int64_t tokens, int threads, const std::string& split) {
  const std::string command = std::string("mpiexec -np ") + std::to_string(ranks) +
                              " --oversubscribe " + self + " --worker --dtype " + dtype +
                              " --reshard " + (reshard ? "1" : "0") + " --steps " +
                              std::to_string(steps) + " --tokens " + std::to_string(tokens) +
                              " --threads " + std::to_string(threads) + " --thread-split " + split;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 0;
  char line[256];
  double result = 0;
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    if (std::strncmp(line, "RESULT ", 7) == 0) result = std::atof(line + 7);
  }
  pclose(pipe);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype = "float32";
  bool is_worker = false, reshard = true;
  int steps = 3;
  int64_t tokens = 512;
  int threads = 1;
  std::string split = "none", dtypes = "float32,bfloat16", rank_list = "1,2";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--worker")) is_worker = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    if (!std::strcmp(argv[i], "--reshard")) reshard = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--thread-split")) split = argv[i + 1];
    if (!std::strcmp(argv[i], "--dtypes")) dtypes = argv[i + 1];
    if (!std::strcmp(argv[i], "--ranks")) rank_list = argv[i + 1];
  }
  if (is_worker) return worker(argc, argv, dtype, reshard, steps, tokens, threads, split);

  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (getuid() == 0) {  // OpenMPI refuses root without these
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const flywheel::model::ModelConfig config = bench_config();
  std::printf(
      "learner_bench: %.1fM-parameter Qwen2-shaped model, %lld tokens per rank per step "
      "(sequences of %lld), %d timed steps, %d thread(s) per rank, --thread-split %s\n",
      config.num_parameters() / 1e6, static_cast<long long>(tokens),
      static_cast<long long>(kSequence), steps, threads, split.c_str());
  for (const std::string d : {"float32", "bfloat16"}) {
    if (!flywheel::bench::listed(dtypes, d)) continue;
    flywheel::model::ThreadLayoutOptions layout;  // the peak under the ranks' own layout
    layout.threads = threads;
    layout.dtype = d == "float32" ? at::kFloat : at::kBFloat16;
    if (flywheel::model::parse_thread_split(split, &layout.split)) {
      flywheel::model::apply_thread_layout(layout);
    } else {
      at::set_num_threads(threads);
    }
    const double peak = flywheel::bench::matmul_gflops(d == "float32" ? at::kFloat : at::kBFloat16);
    double one = 0;
    for (int ranks : {1, 2}) {
      if (!flywheel::bench::listed(rank_list, std::to_string(ranks))) continue;
      for (bool r : {true, false}) {
        const double tps = run_worker(argv[0], ranks, d, r, steps, tokens, threads, split);
        const double gflops = tps * flops_per_token(config) / 1e9 / ranks;  // per rank (core)
        if (ranks == 1 && r) one = tps;
        std::printf(
            "%-8s %d rank(s) reshard_after_forward=%d: %7.1f tokens/s, %6.1f GFLOP/s per rank = "
            "%5.1f%% of the %s matmul peak (%.1f GFLOP/s, %d thread(s))%s\n",
            d.c_str(), ranks, r, tps, gflops, 100 * gflops / peak, d.c_str(), peak, threads,
            ranks == 2 && r && one > 0
                ? (std::string(", ") + std::to_string(tps / one).substr(0, 4) + "x 1 rank").c_str()
                : "");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
