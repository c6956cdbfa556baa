// The agent endpoint's overhead (docs/agents.md): 1-token completions over HTTP on loopback,
// requests/s and p50 / p99 latency, beside the same completion submitted to the engine directly
// (its own step time), measured in the same run on the same tiny model.
//
//   agent_endpoint_bench [--requests 2000] [--prompt-tokens 32]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/model/model_config.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rollout/agent/agent_runner.h"

namespace {

using flywheel::rollout::AgentRunner;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One HTTP/1.1 request on a fresh loopback connection; the status code, or -1.
int http_post(int port, const std::string& path, const std::string& key, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const std::string request = absl::StrCat(
      "POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", key,
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0)
    response.append(buffer, static_cast<size_t>(n));
  close(fd);
  if (response.size() < 12) return -1;
  return std::atoi(response.c_str() + 9);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t requests = 2000, prompt_tokens = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--requests") requests = std::atoll(argv[i + 1]);
    if (flag == "--prompt-tokens") prompt_tokens = std::atoll(argv[i + 1]);
  }
  namespace fw = flywheel;
  fw::model::ModelConfig config;
  config.model_type = "qwen2";
  config.vocab_size = 97;
  config.hidden_size = 64;
  config.intermediate_size = 128;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 16;
  config.rms_norm_eps = 1e-6;
  config.rope_theta = 10000;
  config.max_position_embeddings = 512;
  config.qkv_bias = true;
  config.eos_token_ids = {2};
  auto model = fw::model::DecoderModel::create(config, fw::model::DecoderOptions{});
  if (!model.ok()) return 1;
  (*model)->init_random(1);
  std::shared_ptr<fw::model::DecoderModel> shared(std::move(*model));
  fw::model::TokenizerSetup tokenizers;
  tokenizers.tokenizer =
      *fw::model::load_tokenizer("/nonexistent-dir", fw::core::TokenizerType::kChar);
  fw::rollout::EngineOptions engine_options;
  engine_options.max_slots = 8;
  engine_options.max_seq_len = 512;
  fw::rollout::EngineContext context;
  context.tokenizer = tokenizers.tokenizer.get();
  auto engine = fw::rollout::GenerationEngine::create(shared, engine_options, context);
  if (!engine.ok()) return 1;
  const std::string prompt(static_cast<size_t>(prompt_tokens), 'x');

  // The engine alone: the same 1-token completion, submitted and stepped until done.
  std::vector<double> direct;
  for (int64_t i = 0; i < std::min<int64_t>(requests, 500); ++i) {
    fw::rollout::GenerationRequest r;
    r.id = absl::StrCat("direct-", i);
    r.prompt_ids = *tokenizers.tokenizer->encode(prompt);
    r.sampling.max_new_tokens = 1;
    const auto start = Clock::now();
    (void)(*engine)->submit(std::move(r));
    while (!(*engine)->idle()) (*engine)->step();
    (void)(*engine)->take_finished();
    direct.push_back(ms_since(start));
  }

  // Over HTTP: one episode whose agent only hands its key to the benchmark, then waits.
  const std::string dir = std::filesystem::temp_directory_path() / "flywheel_agent_bench";
  std::filesystem::create_directories(dir);
  const std::string key_file = dir + "/key";
  std::filesystem::remove(key_file);
  fw::rollout::AgentRunnerOptions options;
  options.agent.command = {"/bin/sh", "-c",
                           absl::StrCat("echo \"$OPENAI_API_KEY\" > ", key_file, ".tmp && mv ",
                                        key_file, ".tmp ", key_file, " && sleep 600")};
  options.sampling.max_new_tokens = 400;
  options.sampling.stop_token_ids = {2};
  auto runner = AgentRunner::create(engine->get(), tokenizers, options);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n", std::string(runner.status().message()).c_str());
    return 1;
  }
  fw::rollout::EpisodeRequest episode;
  episode.id = "bench";
  episode.record = std::make_shared<fw::core::Json>(fw::core::Json::object());
  (void)(*runner)->submit(episode);
  std::atomic<bool> done{false};
  std::vector<double> over_http;
  const int port =
      std::atoi((*runner)->base_url().substr((*runner)->base_url().rfind(':') + 1).c_str());
  std::thread client([&] {
    while (!std::filesystem::exists(key_file))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string key;
    std::ifstream(key_file) >> key;
    const std::string body =
        absl::StrCat("{\"prompt\": \"", prompt, "\", \"max_tokens\": 1, \"model\": \"m\"}");
    for (int64_t i = 0; i < requests; ++i) {
      const auto start = Clock::now();
      const int status = http_post(port, "/v1/completions", key, body);
      if (status != 200) {
        std::fprintf(stderr, "request %ld: HTTP %d\n", static_cast<long>(i), status);
        break;
      }
      over_http.push_back(ms_since(start));
    }
    done.store(true);
  });
  const auto start = Clock::now();
  while (!done.load()) (*runner)->step();
  const double seconds = ms_since(start) / 1e3;
  client.join();
  (*runner)->abort_all();
  if (over_http.empty() || direct.empty()) return 1;
  const double p50 = percentile(over_http, 0.5), p99 = percentile(over_http, 0.99);
  const double d50 = percentile(direct, 0.5), d99 = percentile(direct, 0.99);
  std::printf("agent endpoint, 1-token completions of a %ld-token prompt, %zu requests:\n",
              static_cast<long>(prompt_tokens), over_http.size());
  std::printf(
      "  over HTTP (loopback, a connection each): %.0f requests/s, p50 %.3f ms, p99 %.3f ms\n",
      static_cast<double>(over_http.size()) / seconds, p50, p99);
  std::printf("  the engine alone (same completion):        p50 %.3f ms, p99 %.3f ms\n", d50, d99);
  std::printf("  the endpoint adds: p50 %.3f ms, p99 %.3f ms\n", p50 - d50, p99 - d99);
  return 0;
}
