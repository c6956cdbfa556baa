#include "flywheel/core/options/buffer_options.h"

#include "absl/strings/str_cat.h"

namespace flywheel::core {

absl::Span<const ChoiceName<StalePolicy>> choice_names(StalePolicy) {
  static constexpr ChoiceName<StalePolicy> kNames[] = {{StalePolicy::kDrop, "drop"},
                                                       {StalePolicy::kRequeue, "requeue"}};
  return kNames;
}

absl::Span<const ChoiceName<BufferSampling>> choice_names(BufferSampling) {
  static constexpr ChoiceName<BufferSampling> kNames[] = {{BufferSampling::kFifo, "fifo"},
                                                          {BufferSampling::kFreshest, "freshest"}};
  return kNames;
}

void bind_options(FieldBinder& b, ServerOptions& o) {
  b.field("bind_address", &o.bind_address,
          FieldInfo("HOST:PORT the controller listens on; loopback by default, port 0 picks a "
                    "free port."));
  b.field("auth_token_file", &o.auth_token_file,
          FieldInfo("File holding the shared authentication token. Empty: read auth_token_env."));
  b.field("auth_token_env", &o.auth_token_env,
          FieldInfo("Environment variable holding the shared token (never put it in YAML)."));
  b.field("tls_cert", &o.tls_cert, FieldInfo("Server certificate (PEM). Empty: no TLS."));
  b.field("tls_key", &o.tls_key, FieldInfo("Server private key (PEM)."));
  b.field("tls_client_ca", &o.tls_client_ca,
          FieldInfo("CA for client certificates; set to require mutual TLS."));
  b.field("max_message_bytes", &o.max_message_bytes,
          FieldInfo("Largest gRPC message accepted or sent.").min(1024));
  b.field("transport_memory_bytes", &o.transport_memory_bytes,
          FieldInfo("Memory the server's gRPC transport may hold for all clients together "
                    "(received and unsent bytes); under pressure it offers smaller windows.")
              .min(int64_t{1} << 20));
  b.field("rpc_deadline_s", &o.rpc_deadline_s,
          FieldInfo("Deadline of every client call in seconds (a push stream's included: it "
                    "must exceed buffer.push_timeout_s); during calls the worker also pings the "
                    "controller this often and drops a connection whose ping goes unanswered "
                    "this long (a stopped controller, a link that went down).")
              .greater_than(0));
  b.field("reconnect_timeout_s", &o.reconnect_timeout_s,
          FieldInfo("How long a rollout worker keeps retrying a controller it cannot reach (a "
                    "learner job restarting from a checkpoint) before it exits with an error.")
              .min(0));
}

absl::Status ServerOptions::validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError("tls_key: tls_cert and tls_key must be set together");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError("tls_client_ca: needs tls_cert and tls_key");
  }
  return absl::OkStatus();
}

void bind_options(FieldBinder& b, BufferOptions& o) {
  b.field(
      "max_staleness", &o.max_staleness,
      FieldInfo("Largest allowed learner_version - oldest token version; 0 = synchronous.").min(0));
  b.choice("stale_policy", &o.stale_policy,
           FieldInfo("What happens to a group that became too stale: drop it or re-issue its "
                     "prompt."));
  b.choice("sampling", &o.sampling,
           FieldInfo("Order in which buffered groups reach the learners."));
  b.field("capacity_groups", &o.capacity_groups, FieldInfo("Maximum buffered groups.").min(1));
  b.field("capacity_bytes", &o.capacity_bytes, FieldInfo("Maximum buffered bytes.").min(1));
  b.field("push_timeout_s", &o.push_timeout_s,
          FieldInfo("How long the controller holds a push back while the buffer is full before "
                    "answering RESOURCE_EXHAUSTED (the worker then pushes it again); less than "
                    "server.rpc_deadline_s.")
              .min(0));
  b.field("lease_timeout_s", &o.lease_timeout_s,
          FieldInfo("A prompt lease expires after this many seconds.").greater_than(0));
  b.field("heartbeat_interval_s", &o.heartbeat_interval_s,
          FieldInfo("Interval of worker heartbeats in seconds.").greater_than(0));
  b.field("missed_heartbeats", &o.missed_heartbeats,
          FieldInfo("Missed heartbeats after which a worker's leases expire.").min(1));
  b.field("drain_timeout_s", &o.drain_timeout_s,
          FieldInfo("After the last step, how long the controller waits for the pushes of "
                    "prompts still leased (workers hear that training is over and stop) before "
                    "it shuts down.")
              .min(0));
  b.field("filter", &o.filter,
          FieldInfo("Group filter applied on insert (e.g. nonzero_reward_std). Empty: none."));
  b.field("filter_metric", &o.filter_metric,
          FieldInfo(
              "What the group filter sees of each response: empty = its total reward; a "
              "reward function's label = that function's score (the fallback when it fails), e.g. "
              "exact_match to keep the groups that accuracy tells apart while a process "
              "reward model shapes the advantages (verl's filter_groups.metric)."));
  b.section("server", &o.server, "The controller's gRPC server.");
}

absl::Status BufferOptions::validate() const {
  absl::Status server_status = server.validate();
  if (!server_status.ok()) {
    return absl::InvalidArgumentError(std::string("server.") +
                                      std::string(server_status.message()));
  }
  // A push held back longer than the client's deadline would end in DEADLINE_EXCEEDED.
  if (push_timeout_s >= server.rpc_deadline_s) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push_timeout_s: ", push_timeout_s, " s must be less than server.rpc_deadline_s (",
        server.rpc_deadline_s, " s), the deadline of the worker's push"));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
