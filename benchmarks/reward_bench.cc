// reward_bench: the scorers' speed beside what bounds it, measured in the same run.
//   math          scores/s on one core, for GSM8K- and MATH-style completions of ~300 tokens
//                 (target >= 20,000);
//   code_exec     latency of a trivial program through the sandbox (p50 / p99) beside a bare
//                 `python3 -c pass` start-up (fork + exec + wait) (target: p50 <= 1.5x bare);
//   reward_model  samples/s of a ~25M-parameter Qwen2-shaped reward model on ~300-token inputs
//                 beside the same decoder's plain forward tokens/s;
//   llm_judge     samples/s of a judge of the same shape reading P(yes) from one forward
//                 (target >= 80% of the plain forward), and generating an 8-token verdict.
// Usage: reward_bench [--only math|code|rm|judge] [--runs N]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "bench_util.h"
#include "flywheel/core/file_io.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rewards/builtins.h"
#include "flywheel/rewards/model/reward_model.h"
#include "flywheel/rollout/judge/llm_judge.h"

extern char** environ;

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;
using rewards::RewardFunction;
using rewards::RewardInput;
using rewards::RewardSpec;

std::unique_ptr<RewardFunction> make(core::PluginRegistry& registry, const std::string& name,
                                     std::map<std::string, std::string> params = {}) {
  RewardSpec spec;
  spec.name = name;
  spec.params = std::move(params);
  auto made = registry.get<RewardFunction, const RewardSpec&>().create(name, spec);
  if (!made.ok()) {
    std::fprintf(stderr, "reward_bench: %s: %s\n", name.c_str(),
                 std::string(made.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*made);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// ~1,200 characters of chain of thought ending in a final answer: GSM8K-style ("#### N") or
// MATH-style (\boxed{...} with a fraction, a radical or an integer).
std::vector<std::pair<std::string, std::string>> math_completions(int n) {
  std::mt19937 rng(7);
  auto num = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < n; ++i) {
    std::string text = "Let's think step by step. ";
    while (text.size() < 1100) {
      const int a = num(2, 999), b = num(2, 99);
      absl::StrAppend(&text, "First we have ", a, " items and each costs $", b,
                      ", so the total is ", a, " \\times ", b, " = ", a * b, ". Then we subtract ",
                      num(1, 50), " and divide by ", num(2, 9), ", which gives about ",
                      num(10, 9999), ". ");
    }
    const int kind = i % 3;
    std::string answer;
    if (kind == 0) {
      answer = absl::StrCat(num(1, 100000));
      absl::StrAppend(&text, "\n#### ", answer);
    } else if (kind == 1) {
      const int p = num(1, 50), q = num(51, 99);
      answer = absl::StrCat(p, "/", q);
      absl::StrAppend(&text, "So the probability is $\\boxed{\\dfrac{", p, "}{", q, "}}$.");
    } else {
      const int k = num(2, 9);
      answer = absl::StrCat(k, "\\sqrt{3}");
      absl::StrAppend(&text, "Hence the side is $\\boxed{", k, "\\sqrt{3}}$ units.");
    }
    out.emplace_back(text, i % 4 == 3 ? "1" : answer);  // a quarter are wrong
  }
  return out;
}

void bench_math(core::PluginRegistry& registry) {
  std::unique_ptr<RewardFunction> math = make(registry, "math");
  const auto cases = math_completions(300);
  std::vector<std::shared_ptr<core::Json>> records;
  size_t chars = 0;
  for (const auto& [text, answer] : cases) {
    records.push_back(std::make_shared<core::Json>(core::Json::object({{"answer", answer}})));
    chars += text.size();
  }
  double correct = 0;
  int64_t scored = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < 2.0) {
    for (size_t i = 0; i < cases.size(); ++i) {
      RewardInput in;
      in.record = records[i].get();
      in.record_name = "bench";
      in.completion = cases[i].first;
      auto out = math->score(in);
      correct += out.ok() ? out->score : 0;
      ++scored;
    }
  }
  const double rate = scored / seconds_since(start);
  std::printf(
      "math          %8.0f scores/s on 1 core (target >= 20000: %s); completions of %zu chars "
      "(~%zu tokens) on average, %.0f%% scored correct\n",
      rate, rate >= 20000 ? "met" : "NOT met", chars / cases.size(), chars / cases.size() / 4,
      100.0 * correct / scored);
}

// Wall time of fork + exec + wait of `argv` (a bare interpreter start).
double spawn_seconds(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto start = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return seconds_since(start);
}

void bench_code(core::PluginRegistry& registry, int runs) {
  std::unique_ptr<RewardFunction> code = make(registry, "code_exec");
  struct Kind {
    const char* name;
    const char* record;
    const char* completion;
  };
  // A stdin/stdout test (one run of the program) and an assertion test (one run of the harness:
  // the solution in a forked child, its value judged outside).
  const Kind kinds[] = {
      {"print(1)", R"({"tests": [{"input": "", "output": "1"}]})", "```python\nprint(1)\n```"},
      {"assert add(1, 2) == 3", R"({"tests": ["assert add(1, 2) == 3"]})",
       "```python\ndef add(a, b):\n    return a + b\n```"}};
  for (const Kind& kind : kinds) {
    auto record = core::Json::parse(kind.record);
    const std::string completion = kind.completion;
    std::vector<double> sandboxed, bare;
    double passed = 0;
    for (int i = 0; i < runs + 3; ++i) {
      RewardInput in;
      in.record = &*record;
      in.record_name = "bench";
      in.completion = completion;
      const auto start = Clock::now();
      auto out = code->score(in);
      const double t = seconds_since(start);
      const double b = spawn_seconds({"/usr/bin/python3", "-c", "pass"});
      if (i < 3) continue;  // warm-up
      sandboxed.push_back(t);
      bare.push_back(b);
      passed += out.ok() ? out->score : 0;
    }
    const double ratio = percentile(sandboxed, 0.5) / percentile(bare, 0.5);
    std::printf(
        "code_exec     %s in the sandbox: p50 %.1f ms, p99 %.1f ms (%d runs, %.0f%% passed); "
        "bare `python3 -c pass`: p50 %.1f ms, p99 %.1f ms; sandbox p50 / bare p50 = %.2fx "
        "(target <= 1.5x: %s)\n",
        kind.name, 1e3 * percentile(sandboxed, 0.5), 1e3 * percentile(sandboxed, 0.99), runs,
        100.0 * passed / runs, 1e3 * percentile(bare, 0.5), 1e3 * percentile(bare, 0.99), ratio,
        ratio <= 1.5 ? "met" : "NOT met");
  }
}

// A random ~25M-parameter Qwen2-shaped sequence classifier with the character tokenizer.
std::string write_reward_model(const fs::path& dir, model::ModelConfig* config) {
  config->model_type = "qwen2";
  config->vocab_size = 100;
  config->hidden_size = 512;
  config->intermediate_size = 1536;
  config->num_hidden_layers = 8;
  config->num_attention_heads = 8;
  config->num_key_value_heads = 2;
  config->head_dim = 64;
  config->max_position_embeddings = 1024;
  config->qkv_bias = true;  // Qwen2
  auto decoder = model::DecoderModel::create(*config, {});
  if (!decoder.ok()) return std::string(decoder.status().message());
  (*decoder)->init_random(1);
  auto writer = model::HfWriter::create(dir.string(), *config, at::kFloat);
  if (!writer.ok()) return std::string(writer.status().message());
  for (const auto& [name, p] : (*decoder)->named_parameters()) {
    if (name != "lm_head.weight") (void)(*writer)->add(name, p);
  }
  (void)(*writer)->add("score.weight", at::randn({1, config->hidden_size}) * 0.02);
  if (absl::Status s = (*writer)->finish(); !s.ok()) return std::string(s.message());
  if (absl::Status s = model::save_default_char_tokenizer(dir.string()); !s.ok()) {
    return std::string(s.message());
  }
  auto json = core::read_json_file((dir / "config.json").string());
  if (!json.ok()) return std::string(json.status().message());
  json->set("architectures", core::Json::array({core::Json("Qwen2ForSequenceClassification")}));
  json->set("num_labels", core::Json(1));
  json->set("pad_token_id", core::Json(0));
  return std::string(
      core::write_file_atomically((dir / "config.json").string(), json->dump()).message());
}

// Scoring samples/s of `scorer` on 32 random 300-character inputs (the character tokenizer: one
// token per character) beside the plain forward of `decoder` on [8, 300], timed interleaved
// (best of 3 each) so that both see the same machine.
struct ScoreVsForward {
  double samples_per_s = 0;
  double forward_tokens_per_s = 0;
  int64_t chars = 300;
};
ScoreVsForward score_vs_forward(const RewardFunction& scorer, const model::DecoderModel& decoder) {
  const int64_t n = 32, rows = 8;
  ScoreVsForward r;
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int64_t i = 0; i < n; ++i) {
    std::string t;
    for (int64_t k = 0; k < r.chars; ++k) t.push_back(static_cast<char>('a' + rng() % 26));
    texts.push_back(t);
  }
  core::Json record = core::Json::object();
  std::vector<RewardInput> inputs(n);
  for (int64_t i = 0; i < n; ++i) {
    inputs[i].record = &record;
    inputs[i].record_name = "bench";
    inputs[i].completion = texts[i];
  }
  model::ForwardBatch batch;
  batch.tokens = at::randint(decoder.config().vocab_size, {rows, r.chars}, at::kLong);
  batch.positions = at::arange(r.chars).repeat({rows, 1});
  auto forward = [&] {
    at::NoGradGuard no_grad;
    decoder.forward(batch);
  };
  auto score = [&] { scorer.score_batch(inputs); };
  forward();
  score();
  double t_score = 1e30, t_forward = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    score();
    t_score = std::min(t_score, seconds_since(start) / (n / static_cast<double>(rows)));
    start = Clock::now();
    forward();
    t_forward = std::min(t_forward, seconds_since(start));
  }
  r.samples_per_s = rows / t_score;
  r.forward_tokens_per_s = static_cast<double>(rows * r.chars) / t_forward;
  return r;
}

int64_t parameter_count(const model::DecoderModel& decoder) {
  int64_t params = 0;
  for (const auto& [name, p] : decoder.named_parameters()) params += p.numel();
  return params;
}

void bench_reward_model() {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("reward_bench_rm_", getpid());
  fs::create_directories(dir);
  model::ModelConfig config;
  const std::string error = write_reward_model(dir, &config);
  if (!error.empty()) {
    std::fprintf(stderr, "reward_bench: writing the reward model: %s\n", error.c_str());
    fs::remove_all(dir);
    return;
  }
  RewardSpec spec;
  spec.name = "reward_model";
  spec.params = {{"path", dir.string()}, {"batch_size", "8"}};
  auto rm = rewards::make_reward_model(spec);
  if (!rm.ok()) {
    std::fprintf(stderr, "reward_bench: %s\n", std::string(rm.status().message()).c_str());
    fs::remove_all(dir);
    return;
  }
  const model::DecoderModel& decoder = dynamic_cast<rewards::RewardModel*>(rm->get())->decoder();
  const ScoreVsForward r = score_vs_forward(**rm, decoder);
  std::printf(
      "reward_model  %.1fM-parameter Qwen2-shaped, 32 x %lld-token inputs, batch 8: %.1f "
      "samples/s = %.0f tokens/s, beside the decoder's plain forward %.0f tokens/s (%.0f%%)\n",
      parameter_count(decoder) / 1e6, static_cast<long long>(r.chars), r.samples_per_s,
      r.samples_per_s * r.chars, r.forward_tokens_per_s,
      100.0 * r.samples_per_s * r.chars / r.forward_tokens_per_s);
  fs::remove_all(dir);
}

// llm_judge with verdict yes_prob (one forward per batch, the verdict read at the last token) on
// a random causal LM of the reward model's shape, beside the same decoder's plain forward
// (target >= 80%); and with verdict label (8 generated tokens per sample, for scale).
void bench_llm_judge() {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("reward_bench_judge_", getpid());
  fs::create_directories(dir);
  model::ModelConfig config;
  config.model_type = "qwen2";
  config.vocab_size = 100;
  config.hidden_size = 512;
  config.intermediate_size = 1536;
  config.num_hidden_layers = 8;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 2;
  config.head_dim = 64;
  config.max_position_embeddings = 1024;
  config.qkv_bias = true;
  config.eos_token_ids = {2};
  auto decoder = model::DecoderModel::create(config, {});
  if (!decoder.ok()) return;
  (*decoder)->init_random(1);
  if (absl::Status s = model::save_hf_model(**decoder, dir.string());
      !s.ok() || !model::save_default_char_tokenizer(dir.string()).ok()) {
    std::fprintf(stderr, "reward_bench: writing the judge: %s\n", std::string(s.message()).c_str());
    fs::remove_all(dir);
    return;
  }
  for (const char* verdict : {"yes_prob", "label"}) {
    RewardSpec spec;
    spec.name = "llm_judge";
    spec.params = {{"path", dir.string()}, {"batch_size", "8"},     {"template", "{completion}?"},
                   {"verdict", verdict},   {"max_new_tokens", "8"}, {"chat_template", "none"}};
    auto judge = rollout::make_llm_judge(spec);
    if (!judge.ok()) {
      std::fprintf(stderr, "reward_bench: %s\n", std::string(judge.status().message()).c_str());
      break;
    }
    const ScoreVsForward r = score_vs_forward(**judge, **decoder);
    const double share = 100.0 * r.samples_per_s * (r.chars + 1) / r.forward_tokens_per_s;
    if (std::string(verdict) == "yes_prob") {
      std::printf(
          "llm_judge     yes_prob, %.1fM-parameter Qwen2-shaped, 32 x %lld-token prompts, batch 8: "
          "%.1f samples/s = %.0f tokens/s, beside the decoder's plain forward %.0f tokens/s "
          "(%.0f%%; target >= 80%%: %s)\n",
          parameter_count(**decoder) / 1e6, static_cast<long long>(r.chars + 1), r.samples_per_s,
          r.samples_per_s * (r.chars + 1), r.forward_tokens_per_s, share,
          share >= 80 ? "met" : "NOT met");
    } else {
      std::printf(
          "llm_judge     label, the same judge generating 8 tokens per sample (engine, batch 8): "
          "%.1f samples/s, %.0f%% of the plain forward's prompt tokens/s\n",
          r.samples_per_s, share);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel;
  std::string only;
  int runs = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
  }
  model::use_huge_pages_for_large_cpu_tensors();  // as the flywheel binary does
  core::PluginRegistry registry;
  if (absl::Status s = rewards::register_rewards_builtins(registry); !s.ok()) return 1;
  std::printf("reward_bench: %d core(s), %d LibTorch thread(s)\n",
              static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), at::get_num_threads());
  if (only.empty() || only == "math") bench::bench_math(registry);
  if (only.empty() || only == "code") bench::bench_code(registry, runs);
  if (only.empty() || only == "rm") bench::bench_reward_model();
  if (only.empty() || only == "judge") bench::bench_llm_judge();
  return 0;
}
