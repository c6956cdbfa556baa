// The rollout-worker side of buffer_bench, run in child processes (`buffer_bench --worker ...`)
// so that, as in a deployment, workers do not share the controller's process or gRPC threads.
#pragma once

#include <string>

namespace flywheel::bench {

struct PushWorkerOptions {
  std::string address;
  int samples = 16;   // trajectories per group
  int tokens = 8192;  // response tokens per trajectory
  int groups_per_call = 16;
  double seconds = 3;
};

// Acquires leases and pushes groups for them until `seconds` have passed; prints
// "groups G seconds S group_bytes N".
int run_push_worker(const PushWorkerOptions& options);

struct AcquireWorkerOptions {
  std::string address;
  int workers = 8;        // each with its own channel (its own TCP connection)
  double rate_hz = 0;     // per worker; 0 = the next call as soon as the reply arrives
  double warmup_s = 0.5;  // calls completing before this are not recorded
  double seconds = 3;
};

// `workers` simulated workers in one thread: each calls AcquireWork, waits for the reply, then
// waits an exponential think time of mean 1/rate_hz. Prints the recorded latencies in
// microseconds, one per line, after a "latencies N" line.
int run_acquire_worker(const AcquireWorkerOptions& options);

}  // namespace flywheel::bench
