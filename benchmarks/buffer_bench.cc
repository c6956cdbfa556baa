// buffer_bench: the controller in this process, rollout workers in child processes (as in a
// deployment), all over loopback gRPC.
//   - push throughput (groups/s, MB/s on the wire) for small (8 x 256 tokens) and large
//     (16 x 8192 tokens) groups, beside raw loopback TCP throughput measured in the same run;
//   - AcquireWork latency with 64 concurrent workers, each on its own connection.
//
//   build/benchmarks/buffer_bench [--seconds S] [--case small|large|latency]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "buffer_bench_worker.h"
#include "flywheel/buffer/controller_server.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace flywheel::buffer;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes per second through one loopback TCP connection (1 MiB writes for `seconds`).
double raw_loopback_once(double seconds) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::atomic<int64_t> received{0};
  std::thread reader([&] {
    int fd = accept(listener, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    ssize_t n;
    while ((n = read(fd, buf.data(), buf.size())) > 0) received += n;
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> chunk(1 << 20, 'x');
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    if (write(fd, chunk.data(), chunk.size()) < 0) break;
  }
  close(fd);
  reader.join();
  double elapsed = seconds_since(start);
  close(listener);
  return received / elapsed;
}

// The best of three runs: the most one connection moved on this machine, the fair limit.
double raw_loopback_bytes_per_s(double seconds) {
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, raw_loopback_once(seconds / 3));
  return best;
}

struct Controller {
  std::unique_ptr<ControllerCore> core;
  std::unique_ptr<PromptDataset> data;
  std::unique_ptr<ControllerServer> server;
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

Controller start_controller(int group_size, int64_t prompts) {
  ControllerOptions o;
  o.num_prompts = prompts;
  o.groups_per_step = 1 << 20;  // the budget never binds in this bench
  o.max_staleness = 0;
  o.capacity_groups = 1 << 20;
  o.capacity_bytes = int64_t{8} << 30;
  o.lease_timeout_s = 1e6;
  o.worker_timeout_s = 1e6;
  o.limits.vocab_size = 1000;
  o.limits.group_size = group_size;
  Controller c;
  c.core = std::move(*ControllerCore::create(o));
  std::vector<std::string> lines(prompts, "{\"prompt\": \"p\"}");
  c.data = std::move(*PromptDataset::from_lines(lines, "bench"));
  ControllerServerOptions so;
  so.max_message_bytes = 256 << 20;
  c.server = std::move(*ControllerServer::start(c.core.get(), c.data.get(), so));
  return c;
}

// Runs this binary with `args` in child processes, concurrently; returns their outputs.
std::vector<std::string> run_children(const std::vector<std::string>& args) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "buffer_bench: cannot find its own executable\n");
    std::exit(1);
  }
  self[n] = '\0';
  std::vector<FILE*> pipes;
  for (const std::string& a : args) {
    pipes.push_back(popen(("exec '" + std::string(self) + "' " + a).c_str(), "r"));
  }
  std::vector<std::string> outputs;
  for (FILE* pipe : pipes) {
    std::string out;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, got);
    if (pclose(pipe) != 0) {
      std::fprintf(stderr, "buffer_bench: a worker process failed\n");
      std::exit(1);
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

void push_bench(const char* name, int samples, int tokens, int groups_per_call, double seconds,
                double raw) {
  Controller c = start_controller(samples, 1 << 20);
  std::atomic<bool> stop{false};
  std::thread drain([&] {  // the learner side: keep the buffer from growing without bound
    while (!stop) {
      if (!c.core->take_batch(std::max<int64_t>(1, c.core->buffered())).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  const std::string out = run_children(
      {"--worker push --address " + c.address() + " --samples " + std::to_string(samples) +
       " --tokens " + std::to_string(tokens) + " --groups-per-call " +
       std::to_string(groups_per_call) + " --seconds " + std::to_string(seconds)})[0];
  stop = true;
  drain.join();
  long long groups = 0;
  double busy = 0;
  size_t group_bytes = 0;
  if (std::sscanf(out.c_str(), "groups %lld busy_s %lf group_bytes %zu", &groups, &busy,
                  &group_bytes) != 3 ||
      busy <= 0) {
    std::fprintf(stderr, "buffer_bench: unexpected push worker output '%s'\n", out.c_str());
    std::exit(1);
  }
  const double mb_per_s = groups * static_cast<double>(group_bytes) / busy / 1e6;
  std::printf(
      "push %-5s %2d x %4d tokens, %2d groups per call: %7.1f groups/s %7.1f MB/s on the wire "
      "= %4.1f%% of raw loopback%s\n",
      name, samples, tokens, groups_per_call, groups / busy, mb_per_s, 100 * mb_per_s / (raw / 1e6),
      tokens >= 8192 ? " (target >= 50%)" : "");
}

// 64 workers: `processes` child processes with workers / processes connections each.
void latency_bench(int workers, int processes, double rate_hz, double seconds) {
  Controller c = start_controller(1, 1 << 20);
  std::vector<std::string> args;
  for (int p = 0; p < processes; ++p) {
    args.push_back("--worker acquire --address " + c.address() + " --workers " +
                   std::to_string(workers / processes) + " --rate " + std::to_string(rate_hz) +
                   " --seconds " + std::to_string(seconds));
  }
  std::vector<double> latencies;
  long long failed = 0;
  for (const std::string& out : run_children(args)) {
    const char* p = out.c_str();
    size_t count = 0;
    long long f = 0;
    int used = 0;
    if (std::sscanf(p, "latencies %zu failed %lld\n%n", &count, &f, &used) != 2) {
      std::fprintf(stderr, "buffer_bench: unexpected acquire worker output\n");
      std::exit(1);
    }
    failed += f;
    p += used;
    for (size_t i = 0; i < count; ++i) latencies.push_back(std::strtod(p, const_cast<char**>(&p)));
  }
  if (latencies.empty()) {
    std::fprintf(stderr, "buffer_bench: no AcquireWork call completed\n");
    std::exit(1);
  }
  std::sort(latencies.begin(), latencies.end());
  auto q = [&](double f) {
    return latencies[std::min(latencies.size() - 1, static_cast<size_t>(f * latencies.size()))] /
           1e3;
  };
  char load[64];
  if (rate_hz > 0) {
    std::snprintf(load, sizeof(load), "%g calls/s each", rate_hz);
  } else {
    std::snprintf(load, sizeof(load), "calling again at once");
  }
  std::printf(
      "AcquireWork, %d workers (%d processes), %-21s: %7.0f calls/s, p50 %.3f ms, p99 %.3f ms, "
      "p99.9 %.3f ms, %lld failed%s\n",
      workers, processes, load, latencies.size() / seconds, q(0.5), q(0.99), q(0.999), failed,
      rate_hz > 0 ? " (target p99 < 2 ms)" : "");
}

int worker_main(int argc, char** argv) {
  std::string mode = argv[2];
  flywheel::bench::PushWorkerOptions push;
  flywheel::bench::AcquireWorkerOptions acquire;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--address") {
      push.address = acquire.address = value;
    } else if (flag == "--seconds") {
      push.seconds = acquire.seconds = std::atof(value.c_str());
    } else if (flag == "--samples") {
      push.samples = std::atoi(value.c_str());
    } else if (flag == "--tokens") {
      push.tokens = std::atoi(value.c_str());
    } else if (flag == "--groups-per-call") {
      push.groups_per_call = std::atoi(value.c_str());
    } else if (flag == "--workers") {
      acquire.workers = std::atoi(value.c_str());
    } else if (flag == "--rate") {
      acquire.rate_hz = std::atof(value.c_str());
    }
  }
  return mode == "push" ? flywheel::bench::run_push_worker(push)
                        : flywheel::bench::run_acquire_worker(acquire);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && !std::strcmp(argv[1], "--worker")) return worker_main(argc, argv);
  double seconds = 3;
  std::string only;  // small | large | latency; empty = all
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: buffer_bench [--seconds S] [--case small|large|latency]\n");
      return 2;
    }
  }
  auto run = [&](const char* name) { return only.empty() || only == name; };
  std::printf(
      "buffer_bench: controller in this process, rollout workers in child processes, loopback "
      "gRPC (plaintext), %u cores\n",
      std::thread::hardware_concurrency());
  if (run("small") || run("large")) {
    const double raw = raw_loopback_bytes_per_s(seconds);
    std::printf("raw loopback TCP, one connection, best of 3 (this run): %.1f MB/s\n", raw / 1e6);
    if (run("small")) push_bench("small", 8, 256, 64, seconds, raw);
    if (run("large")) push_bench("large", 16, 8192, 16, seconds, raw);
  }
  if (run("latency")) {
    latency_bench(64, 8, 0, seconds);
    latency_bench(64, 8, 100, seconds);
  }
  return 0;
}
