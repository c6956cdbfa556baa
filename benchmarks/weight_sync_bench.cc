// weight_sync_bench: weight publication to a rollout worker, weight_sync.transport grpc and mpi.
// grpc: the controller in this process publishes a ~400 MB model (100M float32 parameters in 200
// tensors); a rollout worker in a child process fetches it over loopback TCP with
// ControllerClient::fetch_weights (manifest, buckets, every checksum checked). mpi: the same
// payload broadcast by rank 0 of `mpirun -np 2` over a WeightChannel (mpirun must be on PATH).
// Prints seconds per update and GB/s beside raw loopback TCP throughput measured in the same run.
//
//   build/benchmarks/weight_sync_bench [--params N] [--bucket-mb M] [--updates U]
//
// --delta: instead, versions that each move every weight a little (weight_sync.delta), fetched
// whole and as deltas, float32 and bfloat16 (weight_sync_delta.cc), with --step F (the
// relative move, 1e-3), --level L (zstd), --threads T (the controller's encoding threads),
// --bind HOST (the controller's address) and
// --worker-prefix CMD (how the worker is started, e.g. `ip netns exec NS`: then the raw TCP
// throughput printed beside is measured between the two, through the same prefix).
// benchmarks/weight_sync_netns.sh runs it between two network namespaces over a 1 Gbit/s link.
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

#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/comm/weight_channel.h"
#include "flywheel/core/crc32c.h"
#include "loopback.h"
#include "weight_sync_delta.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace flywheel::buffer;
namespace core = flywheel::core;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `params` float32 parameters in `tensors` tensors of about equal size, filled with noise.
core::PublishedWeights make_weights(int64_t version, int64_t params, int tensors, uint64_t bucket) {
  core::PublishedWeights w;
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
  core::PublishedWeights weights;  // reused: its payload's pages are faulted in once
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

// One side of the MPI channel (weight_sync.transport: mpi), run under `mpirun -np 2`: rank 0
// broadcasts `updates` versions through a WeightChannel, rank 1 receives each (manifest and
// checksum verified). Rank 0 prints "seconds S" per update, barrier to barrier.
int mpi_main(int64_t params, int updates, double bucket_mb) {
  auto runtime = flywheel::comm::MpiRuntime::init(nullptr, nullptr);
  if (!runtime.ok()) return 1;
  flywheel::comm::CommunicatorOptions options;
  options.name = "bench";
  options.timeout_s = 600;
  auto world = flywheel::comm::MpiCommunicator::world(**runtime, options);
  if (!world.ok()) return 1;
  flywheel::comm::WeightChannel channel(world->get(), world->get());
  const uint64_t bucket = static_cast<uint64_t>(bucket_mb * (1 << 20));
  core::PublishedWeights w;
  if (channel.rank() == 0) {
    w = make_weights(1, params, 200, bucket);
    w.crc32c = core::crc32c_extend(0, w.payload.data(), w.payload.size());
  }
  for (int i = 0; i < updates; ++i) {
    (*world)->barrier();
    const auto start = Clock::now();
    if (channel.rank() == 0) {
      channel.send(w);
    } else {
      while (true) {
        auto r = channel.receive(&w);
        if (!r.ok()) {
          std::fprintf(stderr, "receiver: %s\n", r.status().ToString().c_str());
          return 1;
        }
        if (*r == flywheel::comm::WeightChannel::Received::kWeights) break;
      }
    }
    (*world)->barrier();
    if (channel.rank() == 0) {
      std::printf("seconds %.6f bytes %zu\n", seconds_since(start), w.payload.size());
      std::fflush(stdout);
    }
  }
  return 0;
}

// Runs `command` and collects the "seconds S" lines it prints; empty when it fails.
std::vector<double> child_seconds(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::vector<double> times;
  char line[256];
  while (pipe != nullptr && std::fgets(line, sizeof(line), pipe) != nullptr) {
    double s = 0;
    if (std::sscanf(line, "seconds %lf", &s) == 1) times.push_back(s);
  }
  if (pipe == nullptr || pclose(pipe) != 0 || times.empty()) {
    std::fprintf(stderr, "weight_sync_bench: the receiver failed (%s)\n", command.c_str());
    return {};
  }
  std::sort(times.begin(), times.end());
  return times;
}

void print_row(const char* transport, size_t bytes, int tensors, double mb, const char* malloc,
               double publish_s, const std::vector<double>& sorted_times, double raw) {
  const double best = sorted_times.front(), median = sorted_times[sorted_times.size() / 2];
  const double gbs = bytes / best / 1e9;
  std::printf("%-9s %6.0f MB  %-8d %3.0f MB   %-8s %-12.3f %-10.3f %-10.3f %-7.2f %5.1f%%\n",
              transport, bytes / 1e6, tensors, mb, malloc, publish_s, best, median, gbs,
              100 * gbs / (raw / 1e9));
}

// --sink HOST:PORT: connects, reads until the sender closes, prints "bytes N seconds S" (from
// the first byte to the end).
int sink_main(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) return 1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return 1;
  std::vector<char> buf(1 << 20);
  double bytes = 0;
  Clock::time_point first;
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) {
    if (bytes == 0) first = Clock::now();
    bytes += static_cast<double>(n);
  }
  close(fd);
  std::printf("bytes %.0f seconds %.6f\n", bytes, seconds_since(first));
  return 0;
}

// Raw TCP bytes/s from `host` to a child started through `prefix` (one connection, 1 MiB
// writes for `seconds`): the link the delta rows' workers fetch over.
double link_bytes_per_s(const std::string& host, const std::string& prefix, const std::string& self,
                        double seconds) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0) {
    return 0;
  }
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string command = "exec " + prefix + " '" + self + "' --sink " + host + ":" +
                              std::to_string(ntohs(addr.sin_port));
  FILE* pipe = popen(command.c_str(), "r");
  const int fd = accept(listener, nullptr, nullptr);
  std::vector<char> chunk(1 << 20, 'x');
  const auto start = Clock::now();
  while (fd >= 0 && seconds_since(start) < seconds) {
    if (write(fd, chunk.data(), chunk.size()) < 0) break;
  }
  if (fd >= 0) close(fd);
  close(listener);
  double bytes = 0, s = 0;
  char line[256];
  while (pipe != nullptr && std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::sscanf(line, "bytes %lf seconds %lf", &bytes, &s);
  }
  if (pipe != nullptr) pclose(pipe);
  return s > 0 ? bytes / s : 0;
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
  if (argc == 5 && !std::strcmp(argv[1], "--mpi")) {
    return mpi_main(std::atoll(argv[2]), std::atoi(argv[3]), std::atof(argv[4]));
  }
  if (argc == 5 && !std::strcmp(argv[1], "--delta-worker")) {
    return flywheel::bench::delta_worker_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]) != 0);
  }
  if (argc == 3 && !std::strcmp(argv[1], "--sink")) return sink_main(argv[2]);
  flywheel::bench::DeltaBenchOptions delta;
  bool delta_only = false;
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
    } else if (!std::strcmp(argv[i], "--delta")) {
      delta_only = true;
      --i;  // no value
    } else if (!std::strcmp(argv[i], "--step")) {
      delta.step = std::atof(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--level")) {
      delta.level = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--threads")) {
      delta.threads = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--bind")) {
      delta.bind_host = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--worker-prefix")) {
      delta.worker_prefix = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "usage: weight_sync_bench [--params N] [--bucket-mb M] [--updates U] [--delta "
                   "[--step F] [--level L] [--threads T] [--bind HOST] [--worker-prefix CMD]]\n");
      return 2;
    }
  }
  if (delta_only) {
    delta.params = params;
    delta.updates = updates;
    delta.self = self_path();
    if (delta.worker_prefix.empty()) {
      delta.raw_bytes_per_s = flywheel::bench::raw_loopback_bytes_per_s(3, 1);
      delta.raw_label = "raw loopback TCP, one connection (this run):";
    } else {
      delta.raw_bytes_per_s = link_bytes_per_s(delta.bind_host, delta.worker_prefix, delta.self, 3);
      delta.raw_label = "raw TCP from " + delta.bind_host +
                        " to the worker's side, one "
                        "connection (this run):";
    }
    std::printf(
        "weight_sync_bench --delta: controller in this process on %s, one rollout worker "
        "in a child process%s%s, %u cores\n",
        delta.bind_host.c_str(), delta.worker_prefix.empty() ? "" : " started by ",
        delta.worker_prefix.c_str(), std::thread::hardware_concurrency());
    return flywheel::bench::run_delta_bench(delta);
  }
  const int kTensors = 200;
  std::printf(
      "weight_sync_bench: controller in this process, one rollout worker in a child process, "
      "loopback gRPC (plaintext), %u cores\n",
      std::thread::hardware_concurrency());
  const double raw = flywheel::bench::raw_loopback_bytes_per_s(3, 1);
  std::printf("raw loopback TCP, one connection, median of 3 (this run): %.2f GB/s\n", raw / 1e9);

  WeightStore store(2);
  absl::StatusOr<flywheel::bench::WeightServer> server =
      flywheel::bench::serve_weights(&store, "127.0.0.1:0");
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(server->server->port());

  std::printf("\n%-9s %-10s %-8s %-8s %-8s %-12s %-10s %-10s %-7s %-7s\n", "transport", "payload",
              "tensors", "bucket", "malloc", "publish (s)", "s/update", "(median)", "GB/s",
              "of raw");
  int64_t version = 0;
  for (const auto& [mb, tuned] : cases) {
    const uint64_t bucket = static_cast<uint64_t>(mb * (1 << 20));
    core::PublishedWeights w = make_weights(++version, params, kTensors, bucket);
    const size_t bytes = w.payload.size();
    const auto publish_start = Clock::now();
    if (absl::Status s = store.publish(std::move(w)); !s.ok()) {
      std::fprintf(stderr, "publish: %s\n", s.ToString().c_str());
      return 1;
    }
    const double publish_s = seconds_since(publish_start);
    std::vector<double> times =
        child_seconds("exec '" + self_path() + "' --worker " + address + " " +
                      std::to_string(updates) + (tuned ? " 1" : " 0"));
    if (times.empty()) return 1;
    print_row("grpc", bytes, kTensors, mb, tuned ? "kept" : "default", publish_s, times, raw);
  }
  // weight_sync.transport mpi: the same payloads broadcast over a WeightChannel to one rank.
  for (const auto& [mb, tuned] : cases) {
    if (!tuned) continue;  // no gRPC receive buffers to keep
    std::string command = "exec mpirun -np 2 --oversubscribe --bind-to none";
    if (geteuid() == 0) {
      command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + command;
    }
    command += " '" + self_path() + "' --mpi " + std::to_string(params) + " " +
               std::to_string(updates) + " " + std::to_string(mb);
    std::vector<double> times = child_seconds(command);
    if (times.empty()) return 1;
    print_row("mpi", static_cast<size_t>(params) * 4, kTensors, mb, "-", 0, times, raw);
  }
  const WeightStore::AckCounters acks = store.ack_counters();
  std::printf(
      "\n(s/update: best of %d fetches into a reused PublishedWeights (the first pays the "
      "page "
      "faults of a fresh payload); grpc: every bucket and the whole payload checksummed, malloc "
      "kept: M_MMAP_THRESHOLD 32 MiB and M_TRIM_THRESHOLD 1 GiB in the worker; mpi: learner rank "
      "0 to one rollout rank of `mpirun -np 2` (OpenMPI's shared-memory transport on one host), "
      "barrier to barrier, the receiver's manifest and whole-payload checksum included; grpc "
      "acks %lld, mismatches %lld)\n",
      updates, static_cast<long long>(acks.acks), static_cast<long long>(acks.mismatches));
  return 0;
}
