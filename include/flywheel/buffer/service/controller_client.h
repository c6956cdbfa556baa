// The client rollout workers use to talk to the controller.
//
// Every call carries the token (if any) and a deadline; a call that fails with UNAVAILABLE (or
// CANCELLED by a server shutting down) is retried with exponential backoff. push_groups() streams
// groups and, when the stream breaks, reconnects and re-pushes exactly the groups not yet
// acknowledged (group ids make re-pushes idempotent). Thread-safe, except that one push_groups()
// call at a time is expected per client.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "flywheel/buffer/trajectory.h"
#include "flywheel/buffer/weight_delta.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/v1/controller.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace flywheel::buffer {

struct ControllerClientOptions {
  std::string address;          // HOST:PORT
  std::string worker_id;        // required
  std::string token;            // shared token; empty = none
  std::string tls_root_ca_pem;  // set: TLS, trusting this CA
  std::string tls_cert_pem;     // client certificate for mutual TLS
  std::string tls_key_pem;
  std::string tls_target_name;  // overrides the name checked against the certificate
  double deadline_s = 30;       // of every call
  int64_t max_message_bytes = 64 << 20;
  int max_attempts = 6;  // per call, for UNAVAILABLE
  // > 0: UNAVAILABLE is retried for this long from a call's first failure, whatever
  // max_attempts says (a worker outliving a learner restart).
  double reconnect_timeout_s = 0;
  double backoff_initial_s = 0.05;
  double backoff_max_s = 2;
  // fetch_weights_into() asks for the delta from the version it holds (weight_sync.delta): the
  // controller sends it when it has one, else the version whole.
  bool weight_deltas = true;
  // Test only: fetch_weights() calls it on every received bucket's bytes (at `offset` in the
  // payload) before checking them, e.g. to corrupt them or to be slow.
  std::function<void(uint64_t offset, char* data, size_t size)> corrupt_bucket_for_test;
};

class ControllerClient {
 public:
  static absl::StatusOr<std::unique_ptr<ControllerClient>> connect(
      const ControllerClientOptions& options);
  // Over an existing channel (e.g. ControllerServer::in_process_channel()).
  static absl::StatusOr<std::unique_ptr<ControllerClient>> over(
      std::shared_ptr<grpc::Channel> channel, const ControllerClientOptions& options);
  ~ControllerClient();  // stops heartbeats

  // Also records the controller's incarnation: acquire_work(), ack_weights() and heartbeats
  // carry it from then on, and answer is_restart() errors once the controller is another start.
  absl::StatusOr<v1::RegisterReply> register_worker(
      const std::map<std::string, std::string>& capabilities = {});
  absl::StatusOr<v1::AcquireWorkReply> acquire_work(int64_t max_prompts);
  // One acknowledgement per group, in the order given. A stream that breaks (UNAVAILABLE) or
  // outlives the deadline while the controller holds it back (a full buffer) is opened again
  // for the groups not yet acknowledged: group ids make re-pushes safe. Errors only when the
  // controller stays unreachable (or rejects the call itself, e.g. UNAUTHENTICATED).
  absl::StatusOr<std::vector<v1::PushAck>> push_groups(const std::vector<TrajectoryGroup>& groups);
  // `drop`: the prompt cannot be generated; the controller drops it rather than re-issuing it.
  // `partial`: the group's samples so far, which the prompt's next worker continues.
  absl::Status release_lease(
      uint64_t lease_id, bool drop = false,
      const google::protobuf::RepeatedPtrField<v1::PartialSample>& partial = {});
  absl::StatusOr<v1::StatusReply> status();

  // The newest published weights if newer than `newer_than`; std::nullopt when the newest
  // published is not newer (or none is published yet). Every bucket's crc32c is checked, a bad
  // bucket is re-requested (up to 3 times, then DataLoss); the whole payload's crc32c is checked
  // against the manifest (DataLoss). When the version is dropped from the store mid-transfer
  // (NOT_FOUND), starts over with the then-newest version. A broken stream (UNAVAILABLE) resumes
  // where it broke. `timeout_s` bounds the whole transfer (DeadlineExceeded), never a hang.
  // The result's crc32c and bucket_crc32c are the verified checksums.
  // Calls are serialized.
  absl::StatusOr<std::optional<core::PublishedWeights>> fetch_weights(int64_t newer_than,
                                                                      double timeout_s);
  // fetch_weights() into `*weights`, reusing its payload's memory: true when it now holds the
  // newest version, false (and `*weights` unchanged) when nothing newer is published. On an
  // error `*weights` holds a partial transfer. Worth it for a worker that fetches every version:
  // first-touching a fresh 400 MB costs 25 ms of page faults on bare metal and over a second on
  // some VMs (this benchmark's, docs/controller.md "Weights").
  // When `*weights` holds version `newer_than` intact (fetched by this call before), asks for
  // the delta from it (options().weight_deltas): applied in place, then the whole payload's
  // crc32c checked against the manifest's; a delta that fails (bad bytes, the wrong base) is
  // counted, logged and the version fetched whole instead.
  absl::StatusOr<bool> fetch_weights_into(int64_t newer_than, double timeout_s,
                                          core::PublishedWeights* weights);
  struct WeightFetchCounters {
    int64_t full = 0;            // versions fetched whole
    int64_t deltas = 0;          // versions built from a delta
    int64_t delta_failures = 0;  // deltas that failed and were fetched whole
    uint64_t bytes = 0;          // payload and delta bytes received (resent buckets not counted)
    double full_s = 0;           // seconds in the calls that fetched a version whole
    double delta_s = 0;          // ... and in those that built one from a delta
  };
  WeightFetchCounters weight_fetch_counters() const;
  // Tells the controller this worker applied `version`, whose payload hashes to `crc32c`:
  // DataLoss when that differs from the published crc32c, FailedPrecondition when the version
  // was never published.
  absl::Status ack_weights(int64_t version, uint32_t crc32c);

  // Sends Heartbeat every `interval_s` from a background thread until destruction.
  void start_heartbeats(double interval_s);
  int64_t reconnects() const { return reconnects_.load(); }
  // The incarnation of the controller the last register_worker() reached (0 before).
  uint32_t incarnation() const { return incarnation_.load(); }
  // The controller said training is over (an AcquireWork DONE or a heartbeat).
  bool controller_done() const { return done_.load(); }
  // A heartbeat found the controller restarted since register_worker() (another incarnation).
  bool controller_restarted() const {
    return restart_seen_by_.load() == static_cast<int64_t>(incarnation_.load());
  }
  // Seconds since the first of the heartbeats that have failed in a row (0 while they are
  // answered, or before start_heartbeats): how long the controller has been silent, for waits
  // that make no call of their own.
  double silent_for_s() const;
  const ControllerClientOptions& options() const { return options_; }
  // The controller was restarted since register_worker() (ABORTED "controller restarted").
  static bool is_restart(const absl::Status& status);

 private:
  ControllerClient() = default;
  struct Stub;
  // Runs `call` until it succeeds or fails with something other than UNAVAILABLE or CANCELLED
  // (and, with `retry_deadline`, DEADLINE_EXCEEDED) or the attempts and reconnect_timeout_s run
  // out.
  template <typename Call>
  absl::Status with_retries(const char* what, Call&& call, bool retry_deadline = false);

  ControllerClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::atomic<int64_t> reconnects_{0};
  std::atomic<uint32_t> incarnation_{0};
  std::atomic<bool> done_{false};
  // The incarnation a heartbeat was sent under when the answer said "restarted"; -1: none. A
  // heartbeat of the previous registration answered after register_worker() does not count.
  std::atomic<int64_t> restart_seen_by_{-1};
  // steady_clock seconds of the first failed heartbeat of the current run of failures; 0: none.
  std::atomic<double> silent_since_{0};
  mutable absl::Mutex fetch_mu_;                           // one weight fetch at a time
  std::string delta_bytes_ ABSL_GUARDED_BY(fetch_mu_);     // reused: a received delta
  DeltaBuffers delta_buffers_ ABSL_GUARDED_BY(fetch_mu_);  // reused: it decompressed
  WeightFetchCounters fetch_counters_ ABSL_GUARDED_BY(fetch_mu_);
  absl::Notification stop_;
  std::thread heartbeat_thread_;
};

}  // namespace flywheel::buffer
