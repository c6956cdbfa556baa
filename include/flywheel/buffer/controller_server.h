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

namespace grpc {
class Channel;
class Server;
}  // namespace grpc

namespace flywheel::buffer {

struct ControllerServerOptions {
  std::string bind_address = "127.0.0.1:0";  // port 0: pick a free port (see port())
  int64_t max_message_bytes = 64 << 20;
  double push_timeout_s = 60;       // a push waits this long on a full buffer
  double heartbeat_interval_s = 5;  // told to workers on Register
  std::string token;                // shared token; empty = no authentication
  std::string tls_cert_pem;         // server certificate; empty = plaintext
  std::string tls_key_pem;
  std::string tls_client_ca_pem;  // set: require client certificates signed by this CA (mTLS)
};

// Reads the shared token from `file` (trailing whitespace stripped) or else the environment
// variable `env`. NotFound when neither holds one.
absl::StatusOr<std::string> read_token(const std::string& file, const std::string& env);

class ControllerServer {
 public:
  // Starts serving `core` (and `dataset`, whose size must match the core's). `clock` gives
  // seconds on a monotonic clock (default: steady_clock). Unavailable when the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<ControllerServer>> start(
      ControllerCore* core, const PromptDataset* dataset, const ControllerServerOptions& options,
      std::function<double()> clock = nullptr);
  ~ControllerServer();  // shuts down

  int port() const { return port_; }
  // A channel to this server that bypasses the network (tests, co-located workers).
  std::shared_ptr<grpc::Channel> in_process_channel();
  void shutdown();

 private:
  class Service;
  ControllerServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace flywheel::buffer
