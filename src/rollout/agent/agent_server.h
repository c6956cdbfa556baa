// The OpenAI-compatible HTTP endpoint of a rollout worker (cpp-httplib): authenticates each
// request by its bearer key, reads its body and hands it to the worker's thread as an AgentCall,
// then writes the answer (or the stream of server-sent events) back. Bad requests are answered
// here, in OpenAI's error shape, and never reach the worker: 400 (a body that is not JSON, a
// bad field), 401 (a missing or unknown key), 404 (another path), 405, 413 (a body above
// max_request_bytes), 429 (the engine saturated, Retry-After: 1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "agent_call.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace flywheel::rollout::agent {

struct AgentServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int64_t max_request_bytes = int64_t{8} << 20;
  int threads = 16;        // concurrent requests (a waiting request holds one)
  std::string auth_token;  // also accepted for GET /v1/models; "" = none
  std::string model_name;  // what GET /v1/models lists
  // The episode a key belongs to, or nullopt. Called on handler threads.
  std::function<std::optional<std::string>(const std::string& key)> episode_of;
  // True when the engine cannot take another request now (429).
  std::function<bool()> saturated;
  // Takes a call for the worker's thread. Called on handler threads.
  std::function<void(std::shared_ptr<AgentCall>)> submit;
};

class AgentServer {
 public:
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<AgentServer>> start(const AgentServerOptions& options);
  // Stops listening; requests being answered are cut off.
  ~AgentServer();

  int port() const { return port_; }
  // "http://HOST:PORT/v1", what OPENAI_BASE_URL is set to.
  std::string base_url() const;

 private:
  explicit AgentServer(const AgentServerOptions& options);
  void install_routes();

  AgentServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flywheel::rollout::agent
