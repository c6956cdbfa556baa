// One HTTP request of an agent, handed from the endpoint's handler thread to the worker's
// thread (which drives the engine) and answered from there: a whole response, or a stream of
// server-sent events.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "openai_request.h"

namespace flywheel::rollout::agent {

class AgentCall {
 public:
  AgentCall(std::string episode_id, CompletionRequest request)
      : episode_id_(std::move(episode_id)),
        request_(std::move(request)),
        arrived_(std::chrono::steady_clock::now()) {}

  const std::string& episode_id() const { return episode_id_; }
  const CompletionRequest& request() const { return request_; }
  std::chrono::steady_clock::time_point arrived() const { return arrived_; }

  // The worker's side. respond() ends the call (also a stream: with an error before any event).
  void respond(int status, std::string body);
  void send_event(std::string data);  // one "data: ..." event of a stream
  void end_stream();                  // then "data: [DONE]"
  // Set by the handler when the client went away; the worker then stops generating for it.
  bool cancelled() const { return cancelled_.load(); }
  void cancel() { cancelled_.store(true); }

  // The handler's side: waits until the call is answered (or events arrive, for a stream).
  // Returns false when nothing came before `timeout`.
  struct Answer {
    bool done = false;  // respond() or end_stream() was called
    int status = 200;
    std::string body;                 // respond()
    std::vector<std::string> events;  // taken
    bool streaming = false;           // events were sent: the status is 200
  };
  Answer wait(absl::Duration timeout);

 private:
  bool ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || !events_.empty(); }

  const std::string episode_id_;
  const CompletionRequest request_;
  const std::chrono::steady_clock::time_point arrived_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool streaming_ ABSL_GUARDED_BY(mu_) = false;
  int status_ ABSL_GUARDED_BY(mu_) = 200;
  std::string body_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> events_ ABSL_GUARDED_BY(mu_);
};

// An OpenAI-shaped error body: {"error": {"message", "type", "param", "code"}}.
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code = "");

}  // namespace flywheel::rollout::agent
