// weight_sync_bench --delta: versions published one after another, each an optimizer-like step
// of the last, fetched by a rollout worker in a child process whole and as deltas
// (weight_sync.delta), float32 and bfloat16. See weight_sync_delta.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/buffer/prompt_dataset.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/buffer/weight_store.h"

namespace flywheel::bench {

struct DeltaBenchOptions {
  int64_t params = 100'000'000;
  int updates = 5;     // versions after the first
  double step = 1e-3;  // each weight moves by about this fraction of itself
  int level = 1;       // zstd level
  int threads = 1;     // the controller's encoding threads
  std::string bind_host = "127.0.0.1";
  std::string worker_prefix;   // prepended to the worker's command (ip netns exec ...)
  std::string self;            // this binary
  double raw_bytes_per_s = 0;  // the link's raw TCP throughput, measured by the caller
  std::string raw_label;
};

// A controller that serves `store`'s weights (and one prompt) on `bind_address` (HOST:PORT).
struct WeightServer {
  std::unique_ptr<buffer::ControllerCore> core;
  std::unique_ptr<buffer::PromptDataset> data;
  std::unique_ptr<buffer::ControllerServer> server;
};
absl::StatusOr<WeightServer> serve_weights(buffer::WeightStore* store,
                                           const std::string& bind_address);

// Runs the delta rows and prints them; nonzero when a step fails.
int run_delta_bench(const DeltaBenchOptions& options);

// The worker: fetches `versions` versions as they are published (deltas asked for when
// `deltas`), acknowledging each; prints "seconds S bytes B delta D" per version.
int delta_worker_main(const std::string& address, int versions, bool deltas);

}  // namespace flywheel::bench
