// The controller's gRPC server: a thin adapter over ControllerCore (STYLE.md R10).
//
// Security: binds to the configured address (loopback by default); when a token is set every
// call must carry "authorization: Bearer <token>" (constant-time compare; UNAUTHENTICATED
// otherwise); optional TLS with a server certificate and, with a client CA, mutual TLS; explicit
// maximum message sizes. Bad input is answered with a status; the server keeps serving.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/buffer/prompt_dataset.h"
#include "flywheel/buffer/weight_store.h"

namespace grpc {
class Channel;
class Server;
}  // namespace grpc

namespace flywheel::buffer {

struct ControllerServerOptions {
  std::string bind_address = "127.0.0.1:0";  // port 0: pick a free port (see port())
  // Largest message either way; an AcquireWork reply grants only the leases that fit in it.
  // Clients must accept replies of this size.
  int64_t max_message_bytes = 64 << 20;
  // Concurrent calls per client connection (HTTP/2 streams); bounds what one connection can
  // make the server hold (docs/controller.md, "Memory").
  int max_streams_per_connection = 16;
  // Memory gRPC's transport may hold for the whole server (buffered requests and replies of every
  // connection); under pressure it offers clients smaller windows.
  int64_t transport_memory_bytes = int64_t{256} << 20;
  // shutdown(): calls still running after this long are cancelled. Idle push streams are
  // closed at once.
  double shutdown_timeout_s = 5;
  double push_timeout_s = 60;       // a push waits this long on a full buffer
  double heartbeat_interval_s = 5;  // told to workers on Register
  std::string token;                // shared token; empty = no authentication
  std::string tls_cert_pem;         // server certificate; empty = plaintext
  std::string tls_key_pem;
  std::string tls_client_ca_pem;  // set: require client certificates signed by this CA (mTLS)
  std::string weights_dtype;      // told to workers on Register ("" = not publishing)
};

// Reads the shared token from `file` (trailing whitespace stripped) or else the environment
// variable `env`. NotFound when neither holds one.
absl::StatusOr<std::string> read_token(const std::string& file, const std::string& env);

class ControllerServer {
 public:
  // Starts serving `core` (and `dataset`, whose size must match the core's). `clock` gives
  // seconds on a monotonic clock (default: monotonic_seconds(); a core restored from a snapshot
  // must be given a time on the same clock). `weights` (optional, must outlive the server) is
  // served by GetWeightsManifest / StreamWeights / AckWeights; without it they answer
  // UNIMPLEMENTED. Unavailable when the address cannot be bound; InvalidArgument when a prompt
  // line cannot fit in one reply.
  static absl::StatusOr<std::unique_ptr<ControllerServer>> start(
      ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& options,
      std::function<double()> clock = nullptr, WeightStore* weights = nullptr);
  ~ControllerServer();  // shuts down

  // Seconds on std::chrono::steady_clock: the server's default clock.
  static double monotonic_seconds();

  int port() const { return port_; }
  // A channel to this server that bypasses the network (tests, co-located workers).
  std::shared_ptr<grpc::Channel> in_process_channel();
  // Closes the push streams (idle ones at once, busy ones once their groups are acknowledged),
  // then stops the server, cancelling what still runs after shutdown_timeout_s. Idempotent.
  void shutdown();

 private:
  class Service;
  ControllerServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  double shutdown_timeout_s_ = 5;
};

}  // namespace flywheel::buffer
