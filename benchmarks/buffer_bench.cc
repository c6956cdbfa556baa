// buffer_bench: the controller in this process, rollout workers in child processes (as in a
// deployment), all over loopback gRPC.
//   - push throughput (groups/s, MB/s on the wire) for small (8 x 256 tokens) and large
//     (16 x 8192 tokens) groups, beside raw loopback TCP throughput measured in the same run;
//   - AcquireWork latency with 64 concurrent workers, each on its own connection.
//
//   build/benchmarks/buffer_bench [--seconds S] [--case small|large|latency]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
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
#include "flywheel/buffer/service/controller_server.h"
#include "loopback.h"

namespace {

using namespace flywheel::buffer;

// CPU seconds (user + system) used so far by this process, or by its waited-for children.
double cpu_seconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
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

// `workers` worker processes, each pushing `groups_per_call` groups per PushGroups stream.
void push_bench(const char* name, int samples, int tokens, int groups_per_call, int workers,
                double seconds, double raw) {
  Controller c = start_controller(samples, 1 << 20);
  std::atomic<bool> stop{false};
  std::thread drain([&] {  // the learner side: keep the buffer from growing without bound
    while (!stop) {
      if (!c.core->take_batch(std::max<int64_t>(1, c.core->buffered())).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  const std::string args = "--worker push --address " + c.address() + " --samples " +
                           std::to_string(samples) + " --tokens " + std::to_string(tokens) +
                           " --groups-per-call " + std::to_string(groups_per_call) + " --seconds " +
                           std::to_string(seconds);
  const double server_cpu0 = cpu_seconds(RUSAGE_SELF), worker_cpu0 = cpu_seconds(RUSAGE_CHILDREN);
  const std::vector<std::string> outputs = run_children(std::vector<std::string>(workers, args));
  stop = true;
  drain.join();
  const double server_cpu = cpu_seconds(RUSAGE_SELF) - server_cpu0;
  const double worker_cpu = cpu_seconds(RUSAGE_CHILDREN) - worker_cpu0;
  long long groups = 0;
  double elapsed = 0;
  size_t group_bytes = 0;
  for (const std::string& out : outputs) {
    long long g = 0;
    double s = 0;
    if (std::sscanf(out.c_str(), "groups %lld seconds %lf group_bytes %zu", &g, &s, &group_bytes) !=
            3 ||
        s <= 0) {
      std::fprintf(stderr, "buffer_bench: unexpected push worker output '%s'\n", out.c_str());
      std::exit(1);
    }
    groups += g;
    elapsed = std::max(elapsed, s);
  }
  const double mb_per_s = groups * static_cast<double>(group_bytes) / elapsed / 1e6;
  std::printf(
      "push %-5s %2d x %4d tokens, %d worker%s x %2d groups per call: %7.1f groups/s %7.1f MB/s "
      "on the wire = %4.1f%% of raw loopback (%d connection%s)%s\n",
      name, samples, tokens, workers, workers > 1 ? "s" : "", groups_per_call, groups / elapsed,
      mb_per_s, 100 * mb_per_s / (raw / 1e6), workers, workers > 1 ? "s" : "",
      tokens >= 8192 ? " (target >= 50%)" : "");
  std::printf("     CPU per group: controller %.3f ms, worker%s %.3f ms (%.2f of %u cores busy)\n",
              server_cpu / groups * 1e3, workers > 1 ? "s" : "", worker_cpu / groups * 1e3,
              (server_cpu + worker_cpu) / elapsed, std::thread::hardware_concurrency());
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
      " (target p99 < 2 ms)");
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
    // Each push result is set against raw TCP over as many connections as it has workers.
    const double raw1 = flywheel::bench::raw_loopback_bytes_per_s(seconds, 1);
    const double raw2 = flywheel::bench::raw_loopback_bytes_per_s(seconds, 2);
    std::printf(
        "raw loopback TCP, median of 3 (this run): one connection %.1f MB/s, two connections "
        "%.1f MB/s\n",
        raw1 / 1e6, raw2 / 1e6);
    if (run("small")) push_bench("small", 8, 256, 64, 1, seconds, raw1);
    if (run("large")) {
      push_bench("large", 16, 8192, 16, 1, seconds, raw1);
      push_bench("large", 16, 8192, 16, 2, seconds, raw2);
    }
  }
  if (run("latency")) {
    latency_bench(64, 2, 0, seconds);  // saturation: as many calls as the machine can answer
    latency_bench(64, 8, 100, seconds);
    latency_bench(64, 8, 300, seconds);
  }
  return 0;
}
