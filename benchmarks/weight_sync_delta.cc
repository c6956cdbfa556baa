#include "weight_sync_delta.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "flywheel/buffer/controller_core.h"
#include "flywheel/buffer/prompt_dataset.h"
#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace core = flywheel::core;
using namespace flywheel::buffer;

constexpr int kTensors = 200;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Uniform in [-1, 1) from a xorshift state.
float uniform(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return static_cast<float>(*x >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// float32 -> bfloat16 bits, round to nearest even (what the learner publishes for bf16).
uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// The master weights: about normal(0, 0.02) (a sum of four uniforms).
std::vector<float> initial_master(int64_t params) {
  std::vector<float> w(static_cast<size_t>(params));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (float& v : w) {
    v = 0.02f * 0.866f * (uniform(&x) + uniform(&x) + uniform(&x) + uniform(&x));
  }
  return w;
}

// One step: every weight times (1 + step * u), u uniform with unit variance.
void step_master(std::vector<float>* w, double step, uint64_t seed) {
  uint64_t x = 0xD1B54A32D192ED03ull ^ seed;
  const float s = static_cast<float>(step * std::sqrt(3.0));
  for (float& v : *w) v *= 1 + s * uniform(&x);
}

core::PublishedWeights publication(const std::vector<float>& master, int64_t version, bool bf16) {
  core::PublishedWeights w;
  w.version = version;
  w.bucket_bytes = 16 << 20;
  const size_t width = bf16 ? 2 : 4, n = master.size();
  w.payload.resize(n * width);
  if (bf16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = to_bf16(master[i]);
      std::memcpy(&w.payload[i * 2], &b, 2);
    }
  } else {
    std::memcpy(w.payload.data(), master.data(), n * 4);
  }
  uint64_t offset = 0;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t count = static_cast<int64_t>(n / kTensors + (t < static_cast<int>(n % kTensors)));
    w.tensors.push_back({"layer." + std::to_string(t) + ".weight",
                         bf16 ? "BF16" : "F32",
                         {count},
                         offset,
                         static_cast<uint64_t>(count) * width});
    offset += static_cast<uint64_t>(count) * width;
  }
  return w;
}

struct Fetch {
  double seconds = 0;
  double bytes = 0;
  bool delta = false;
};

// Runs the worker through `prefix` and reads its lines.
std::vector<Fetch> child_fetches(FILE* pipe) {
  std::vector<Fetch> fetches;
  char line[256];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    Fetch f;
    int delta = 0;
    if (std::sscanf(line, "seconds %lf bytes %lf delta %d", &f.seconds, &f.bytes, &delta) == 3) {
      f.delta = delta != 0;
      fetches.push_back(f);
    }
  }
  return fetches;
}

// Waits until the worker acknowledged `version`.
bool wait_ack(const WeightStore& store, int64_t version) {
  const auto start = Clock::now();
  while (seconds_since(start) < 300) {
    auto acked = store.worker_versions();
    auto it = acked.find("bench");
    if (it != acked.end() && it->second >= version) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

absl::StatusOr<WeightServer> serve_weights(WeightStore* store, const std::string& bind_address) {
  ControllerOptions co;
  co.num_prompts = 1;
  co.limits.group_size = 1;
  co.limits.vocab_size = 10;
  WeightServer w;
  FLYWHEEL_ASSIGN_OR_RETURN(w.core, ControllerCore::create(co));
  FLYWHEEL_ASSIGN_OR_RETURN(w.data, PromptDataset::from_lines({"{\"prompt\": \"p\"}"}, "bench"));
  ControllerServerOptions so;
  so.bind_address = bind_address;
  FLYWHEEL_ASSIGN_OR_RETURN(
      w.server, ControllerServer::start(w.core.get(), w.data.get(), so, nullptr, store));
  return w;
}

int delta_worker_main(const std::string& address, int versions, bool deltas) {
  ControllerClientOptions o;
  o.address = address;
  o.worker_id = "bench";
  o.weight_deltas = deltas;
  auto client = ControllerClient::connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "worker: %s\n", client.status().ToString().c_str());
    return 1;
  }
  core::PublishedWeights weights;
  int64_t known = -1;
  for (int got = 0; got < versions;) {
    const uint64_t bytes_before = (*client)->weight_fetch_counters().bytes;
    const int64_t deltas_before = (*client)->weight_fetch_counters().deltas;
    const auto start = Clock::now();
    auto fetched = (*client)->fetch_weights_into(known, 300, &weights);
    const double s = seconds_since(start);
    if (!fetched.ok()) {
      std::fprintf(stderr, "worker: fetch failed: %s\n", fetched.status().ToString().c_str());
      return 1;
    }
    if (!*fetched) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      continue;
    }
    known = weights.version;
    if (absl::Status acked = (*client)->ack_weights(weights.version, weights.crc32c); !acked.ok()) {
      std::fprintf(stderr, "worker: ack failed: %s\n", acked.ToString().c_str());
      return 1;
    }
    const ControllerClient::WeightFetchCounters c = (*client)->weight_fetch_counters();
    std::printf("seconds %.6f bytes %.0f delta %d\n", s,
                static_cast<double>(c.bytes - bytes_before), c.deltas > deltas_before ? 1 : 0);
    std::fflush(stdout);
    ++got;
  }
  return 0;
}

int run_delta_bench(const DeltaBenchOptions& o) {
  std::printf(
      "\ndelta publication (weight_sync.delta, zstd level %d, %d encoding thread(s)): %d versions "
      "after the first, each "
      "weight times (1 + %g u), u of unit variance (about an optimizer step); the worker fetches "
      "each as it is published, whole or as a delta of the one it holds; %s %.3f GB/s\n",
      o.level, o.threads, o.updates, o.step, o.raw_label.c_str(), o.raw_bytes_per_s / 1e9);
  std::printf("%-6s %-6s %-9s %-14s %-10s %-10s %-10s %-9s %-10s\n", "dtype", "fetch", "payload",
              "MB/version", "of whole", "s/version", "(median)", "encode s", "link use");
  const std::vector<float> initial = initial_master(o.params);
  for (const bool bf16 : {false, true}) {
    for (const bool deltas : {false, true}) {
      WeightStore store(2, {deltas ? o.level : 0, o.threads});
      absl::StatusOr<WeightServer> server = serve_weights(&store, o.bind_host + ":0");
      if (!server.ok()) {
        std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
        return 1;
      }
      const std::string address = o.bind_host + ":" + std::to_string(server->server->port());
      std::vector<float> master = initial;
      if (!store.publish(publication(master, 0, bf16)).ok()) return 1;
      const std::string command = "exec " + o.worker_prefix + " '" + o.self + "' --delta-worker " +
                                  address + " " + std::to_string(o.updates + 1) +
                                  (deltas ? " 1" : " 0");
      FILE* pipe = popen(command.c_str(), "r");
      if (pipe == nullptr) return 1;
      bool ok = wait_ack(store, 0);
      for (int u = 1; ok && u <= o.updates; ++u) {
        step_master(&master, o.step, static_cast<uint64_t>(u));
        ok = store.publish(publication(master, u, bf16)).ok() && wait_ack(store, u);
      }
      std::vector<Fetch> fetches = child_fetches(pipe);
      if (pclose(pipe) != 0 || !ok || fetches.size() != static_cast<size_t>(o.updates) + 1) {
        std::fprintf(stderr, "weight_sync_bench: the delta worker failed (%s)\n", command.c_str());
        return 1;
      }
      fetches.erase(fetches.begin());  // the first version comes whole in both rows
      std::vector<double> seconds;
      double bytes = 0;
      int as_delta = 0;
      for (const Fetch& f : fetches) {
        seconds.push_back(f.seconds);
        bytes += f.bytes;
        as_delta += f.delta;
      }
      std::sort(seconds.begin(), seconds.end());
      const double whole = static_cast<double>(o.params) * (bf16 ? 2 : 4);
      const double per_version = bytes / fetches.size();
      const WeightStore::DeltaCounters dc = store.delta_counters();
      char label[32];
      std::snprintf(label, sizeof(label), "%s", deltas ? "delta" : "whole");
      std::printf(
          "%-6s %-6s %5.0f MB  %-14.1f %-10.3f %-10.3f %-10.3f %-9s %5.1f%%\n",
          bf16 ? "bf16" : "f32", label, whole / 1e6, per_version / 1e6, per_version / whole,
          seconds.front(), seconds[seconds.size() / 2],
          dc.encoded > 0 ? std::to_string(dc.encode_s / dc.encoded).substr(0, 5).c_str() : "-",
          100 * (per_version / seconds[seconds.size() / 2]) / o.raw_bytes_per_s);
      if (deltas && as_delta != o.updates) {
        std::fprintf(stderr, "weight_sync_bench: %d of %d versions came as deltas\n", as_delta,
                     o.updates);
        return 1;
      }
    }
  }
  std::printf(
      "(MB/version: bytes received per version after the first, whole or delta; s/version: the "
      "worker's fetch_weights_into, manifest to the whole payload's crc32c checked, with "
      "whatever part of the controller's encoding of the delta it waited for (from the second "
      "delta on the controller starts encoding at publication); encode s: the "
      "controller's XOR + byte planes + zstd per version; link use: MB/version over the median "
      "s/version, against the raw throughput above)\n");
  return 0;
}

}  // namespace flywheel::bench
