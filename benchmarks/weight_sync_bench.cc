// weight_sync_bench: weight publication over the controller's gRPC service (weight_sync.transport:
// grpc). The controller in this process publishes a ~400 MB model (100M float32 parameters in 200
// tensors); a rollout worker in a child process fetches it over loopback TCP with
// ControllerClient::fetch_weights (manifest, buckets, every checksum checked). Prints seconds per
// update and GB/s beside raw loopback TCP throughput measured in the same run.
//
//   build/benchmarks/weight_sync_bench [--params N] [--bucket-mb M] [--updates U]
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flywheel/buffer/controller_client.h"
#include "flywheel/buffer/controller_server.h"
#include "flywheel/buffer/weight_store.h"
#include "loopback.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace flywheel::buffer;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `params` float32 parameters in `tensors` tensors of about equal size, filled with noise.
PublishedWeights make_weights(int64_t version, int64_t params, int tensors, uint64_t bucket) {
  PublishedWeights w;
  w.version = version;
  w.bucket_bytes = bucket;
  w.payload.resize(static_cast<size_t>(params) * 4);
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(version + 1);
  for (size_t i = 0; i + 8 <= w.payload.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&w.payload[i], &x, 8);
  }
  uint64_t offset = 0;
  for (int t = 0; t < tensors; ++t) {
    const int64_t n = params / tensors + (t < params % tensors ? 1 : 0);
    w.tensors.push_back({"layer." + std::to_string(t) + ".weight",
                         "F32",
                         {n},
                         offset,
                         static_cast<uint64_t>(n) * 4});
    offset += static_cast<uint64_t>(n) * 4;
  }
  return w;
}

// The worker: fetches the weights `updates` times; prints "seconds S" per update. With
// `tune_malloc`, glibc keeps freed memory instead of returning it to the kernel
// (docs/controller.md, "Weights": gRPC's receive buffers are otherwise faulted in afresh for every
// bucket).
int worker_main(const std::string& address, int updates, bool tune_malloc) {
  if (tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  ControllerClientOptions o;
  o.address = address;
  o.worker_id = "bench";
  auto client = ControllerClient::connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "worker: %s\n", client.status().ToString().c_str());
    return 1;
  }
  PublishedWeights weights;  // reused: its payload's pages are faulted in once
  for (int i = 0; i < updates; ++i) {
    const auto start = Clock::now();
    auto fetched = (*client)->fetch_weights_into(-1, 120, &weights);
    const double s = seconds_since(start);
    if (!fetched.ok() || !*fetched) {
      std::fprintf(stderr, "worker: fetch failed: %s\n", fetched.status().ToString().c_str());
      return 1;
    }
    absl::Status acked = (*client)->ack_weights(weights.version, weights.crc32c);
    if (!acked.ok()) {
      std::fprintf(stderr, "worker: ack failed: %s\n", acked.ToString().c_str());
      return 1;
    }
    std::printf("seconds %.6f bytes %zu\n", s, weights.payload.size());
    std::fflush(stdout);
  }
  return 0;
}

std::string self_path() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  return self;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && !std::strcmp(argv[1], "--worker")) {
    return worker_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]) != 0);
  }
  int64_t params = 100'000'000;
  int updates = 5;
  // (bucket MB, tuned malloc in the worker)
  std::vector<std::pair<double, bool>> cases = {{64, true}, {16, true}, {4, true}, {16, false}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params")) {
      params = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--updates")) {
      updates = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--bucket-mb")) {
      cases = {{std::atof(argv[i + 1]), true}, {std::atof(argv[i + 1]), false}};
    } else {
      std::fprintf(stderr, "usage: weight_sync_bench [--params N] [--bucket-mb M] [--updates U]\n");
      return 2;
    }
  }
  const int kTensors = 200;
  std::printf(
      "weight_sync_bench: controller in this process, one rollout worker in a child process, "
      "loopback gRPC (plaintext), %u cores\n",
      std::thread::hardware_concurrency());
  const double raw = flywheel::bench::raw_loopback_bytes_per_s(3, 1);
  std::printf("raw loopback TCP, one connection, median of 3 (this run): %.2f GB/s\n", raw / 1e9);

  ControllerOptions co;
  co.num_prompts = 1;
  co.limits.group_size = 1;
  co.limits.vocab_size = 10;
  auto core = std::move(*ControllerCore::create(co));
  auto data = std::move(*PromptDataset::from_lines({"{\"prompt\": \"p\"}"}, "bench"));
  WeightStore store(2);
  auto server = std::move(*ControllerServer::start(core.get(), data.get(), {}, nullptr, &store));
  const std::string address = "127.0.0.1:" + std::to_string(server->port());

  std::printf("\n%-10s %-8s %-8s %-8s %-12s %-10s %-10s %-7s %-7s\n", "payload", "tensors",
              "bucket", "malloc", "publish (s)", "s/update", "(median)", "GB/s", "of raw");
  int64_t version = 0;
  for (const auto& [mb, tuned] : cases) {
    const uint64_t bucket = static_cast<uint64_t>(mb * (1 << 20));
    PublishedWeights w = make_weights(++version, params, kTensors, bucket);
    const size_t bytes = w.payload.size();
    const auto publish_start = Clock::now();
    if (absl::Status s = store.publish(std::move(w)); !s.ok()) {
      std::fprintf(stderr, "publish: %s\n", s.ToString().c_str());
      return 1;
    }
    const double publish_s = seconds_since(publish_start);
    const std::string command = "exec '" + self_path() + "' --worker " + address + " " +
                                std::to_string(updates) + (tuned ? " 1" : " 0");
    FILE* pipe = popen(command.c_str(), "r");
    std::vector<double> times;
    char line[256];
    while (pipe != nullptr && std::fgets(line, sizeof(line), pipe) != nullptr) {
      double s = 0;
      if (std::sscanf(line, "seconds %lf", &s) == 1) times.push_back(s);
    }
    if (pipe == nullptr || pclose(pipe) != 0 || times.empty()) {
      std::fprintf(stderr, "weight_sync_bench: the worker failed\n");
      return 1;
    }
    std::sort(times.begin(), times.end());
    const double best = times.front(), median = times[times.size() / 2];
    const double gbs = bytes / best / 1e9;
    std::printf("%6.0f MB  %-8d %3.0f MB   %-8s %-12.3f %-10.3f %-10.3f %-7.2f %5.1f%%\n",
                bytes / 1e6, kTensors, mb, tuned ? "kept" : "default", publish_s, best, median, gbs,
                100 * gbs / (raw / 1e9));
  }
  const WeightStore::AckCounters acks = store.ack_counters();
  std::printf(
      "\n(s/update: best of %d fetches into a reused PublishedWeights (the first pays the page "
      "faults of a fresh payload), every bucket and the whole payload checksummed; malloc kept: "
      "M_MMAP_THRESHOLD 32 MiB and M_TRIM_THRESHOLD 1 GiB in the worker; acks %lld, mismatches "
      "%lld)\n",
      updates, static_cast<long long>(acks.acks), static_cast<long long>(acks.mismatches));
  return 0;
}
