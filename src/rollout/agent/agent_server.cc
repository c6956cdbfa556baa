#include "agent_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"

namespace flywheel::rollout::agent {
namespace {

constexpr char kJson[] = "application/json";

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& code = "") {
  res.status = status;
  res.set_content(error_body(message, type, code), kJson);
}

std::string bearer_key(const httplib::Request& req) {
  const std::string header = req.get_header_value("Authorization");
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(header, kBearer)) return "";
  return header.substr(kBearer.size());
}

// Every agent may connect at once (urllib opens a connection per request). Debian's httplib is a
// compiled library that listens with a backlog of 5, and bursts of connections were reset
// under load: the socket listens again with this one.
constexpr int kListenBacklog = 1024;

}  // namespace

AgentServer::AgentServer(const AgentServerOptions& options)
    : options_(options), server_(std::make_unique<httplib::Server>()) {}

AgentServer::~AgentServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string AgentServer::base_url() const {
  return absl::StrCat("http://", options_.host, ":", port_, "/v1");
}

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::start(const AgentServerOptions& options) {
  std::unique_ptr<AgentServer> server(new AgentServer(options));
  server->install_routes();
  int socket_fd = -1;  // the socket bound last (the one listening, when binding succeeds)
  server->server_->set_socket_options([&socket_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    socket_fd = sock;
  });
  const int port =
      options.port == 0
          ? server->server_->bind_to_any_port(options.host)
          : (server->server_->bind_to_port(options.host, options.port) ? options.port : -1);
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("rollout.agent: cannot listen on ", options.host, ":", options.port));
  }
  if (socket_fd < 0 || ::listen(socket_fd, kListenBacklog) != 0) {
    return absl::UnavailableError(absl::StrCat("rollout.agent: cannot listen on ", options.host,
                                               ":", port, " with a backlog of ", kListenBacklog));
  }
  server->port_ = port;
  httplib::Server* raw = server->server_.get();
  server->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  return server;
}

void AgentServer::install_routes() {
  httplib::Server& s = *server_;
  const int threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(static_cast<size_t>(options_.max_request_bytes));
  s.set_keep_alive_max_count(1000);
  s.set_read_timeout(60, 0);
  s.set_write_timeout(60, 0);
  // Errors httplib answers itself (413, 404, a bad request line) get OpenAI's error shape too.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, 413,
                 absl::StrCat("the request body is larger than rollout.agent.max_request_bytes (",
                              options_.max_request_bytes, " bytes)"),
                 "invalid_request_error", "request_too_large");
    } else if (res.status == 404) {
      send_error(res, 404, absl::StrCat("no such endpoint: ", req.method, " ", req.path),
                 "invalid_request_error", "not_found");
    } else {
      send_error(res, res.status, absl::StrCat("HTTP ", res.status), "invalid_request_error");
    }
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string key = bearer_key(req);
    const bool known = (!options_.auth_token.empty() && key == options_.auth_token) ||
                       (!key.empty() && options_.episode_of(key).has_value());
    if (!known) {
      send_error(res, 401, "invalid API key: use the episode's OPENAI_API_KEY",
                 "invalid_request_error", "invalid_api_key");
      return;
    }
    core::Json model = core::Json::object();
    model.set("id", options_.model_name);
    model.set("object", "model");
    model.set("created", 0);
    model.set("owned_by", "flywheel");
    core::Json list = core::Json::object();
    list.set("object", "list");
    list.set("data", core::Json::array({std::move(model)}));
    res.set_content(list.dump(), kJson);
  });
  auto completion = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      const std::string key = bearer_key(req);
      std::optional<std::string> episode = key.empty() ? std::nullopt : options_.episode_of(key);
      if (!episode) {
        send_error(res, 401,
                   key.empty() ? "missing API key: send the episode's OPENAI_API_KEY as a bearer "
                                 "token"
                               : "invalid API key: it belongs to no running episode",
                   "invalid_request_error", "invalid_api_key");
        return;
      }
      absl::StatusOr<core::Json> body = core::Json::parse(req.body);
      if (!body.ok()) {
        send_error(res, 400, absl::StrCat("the body is not JSON: ", body.status().message()),
                   "invalid_request_error");
        return;
      }
      absl::StatusOr<CompletionRequest> request =
          chat ? parse_chat_request(*body) : parse_completion_request(*body);
      if (!request.ok()) {
        send_error(res, 400, std::string(request.status().message()), "invalid_request_error");
        return;
      }
      if (options_.saturated()) {
        res.set_header("Retry-After", "1");
        send_error(res, 429, "the engine is saturated; retry", "rate_limit_error",
                   "rate_limit_exceeded");
        return;
      }
      const bool stream = request->stream;
      auto call = std::make_shared<AgentCall>(*episode, *std::move(request));
      options_.submit(call);
      // The first answer decides: an error (any status) or a stream of events.
      AgentCall::Answer first;
      while (true) {
        first = call->wait(absl::Seconds(1));
        if (first.done || !first.events.empty()) break;
      }
      if (!first.streaming) {
        res.status = first.status;
        res.set_content(first.body, kJson);
        return;
      }
      (void)stream;
      auto pending = std::make_shared<AgentCall::Answer>(std::move(first));
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [call, pending](size_t, httplib::DataSink& sink) {
            AgentCall::Answer answer = pending->events.empty() && !pending->done
                                           ? call->wait(absl::Milliseconds(200))
                                           : std::move(*pending);
            *pending = AgentCall::Answer();
            for (const std::string& event : answer.events) {
              const std::string data = absl::StrCat("data: ", event, "\n\n");
              if (!sink.is_writable() || !sink.write(data.data(), data.size())) {
                call->cancel();  // the client went away: stop generating for it
                return false;
              }
            }
            if (answer.done) {
              sink.done();
              return true;
            }
            if (!sink.is_writable()) {
              call->cancel();
              return false;
            }
            return true;
          },
          [call](bool success) {
            if (!success) call->cancel();
          });
    };
  };
  s.Post("/v1/chat/completions", completion(true));
  s.Post("/v1/completions", completion(false));
}

}  // namespace flywheel::rollout::agent
