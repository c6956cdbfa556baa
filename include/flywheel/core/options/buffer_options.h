// `buffer:` — the controller: trajectory buffer, staleness budget, leases and its gRPC server.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// buffer.stale_policy.
enum class StalePolicy { kDrop, kRequeue };
absl::Span<const ChoiceName<StalePolicy>> choice_names(StalePolicy);

// buffer.sampling.
enum class BufferSampling { kFifo, kFreshest };
absl::Span<const ChoiceName<BufferSampling>> choice_names(BufferSampling);

struct ServerOptions {
  std::string bind_address = "127.0.0.1:0";  // loopback by default; port 0 = pick one
  std::string auth_token_file;               // shared token file; "" = use auth_token_env
  std::string auth_token_env = "FLYWHEEL_TOKEN";
  std::string tls_cert;       // PEM; "" = plaintext
  std::string tls_key;        // PEM
  std::string tls_client_ca;  // PEM; set = require client certificates (mTLS)
  int64_t max_message_bytes = 64 << 20;
  int64_t transport_memory_bytes = int64_t{256} << 20;  // gRPC transport buffers, all clients
  double rpc_deadline_s = 30.0;                         // deadline on every client call
  double reconnect_timeout_s = 120.0;  // a worker retries an unreachable controller this long

  absl::Status validate() const;
};

struct BufferOptions {
  int64_t max_staleness = 1;  // 0 = synchronous on-policy
  StalePolicy stale_policy = StalePolicy::kDrop;
  BufferSampling sampling = BufferSampling::kFifo;
  int64_t capacity_groups = 1024;
  int64_t capacity_bytes = int64_t{1} << 30;
  double push_timeout_s = 20.0;  // backpressure wait before RESOURCE_EXHAUSTED; < rpc_deadline_s
  double lease_timeout_s = 600.0;
  double heartbeat_interval_s = 5.0;
  int64_t missed_heartbeats = 3;  // a worker is gone after this many
  double drain_timeout_s = 30.0;  // at the end: waiting for pushes of prompts still leased
  std::string filter;             // group filter, e.g. nonzero_reward_std; "" = none
  std::string filter_metric;      // reward_breakdown entry the filter sees; "" = the reward
  ServerOptions server;

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, ServerOptions& o);
void bind_options(FieldBinder& b, BufferOptions& o);

}  // namespace flywheel::core
