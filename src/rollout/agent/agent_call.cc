#include "agent_call.h"

#include "flywheel/core/json.h"

namespace flywheel::rollout::agent {

void AgentCall::respond(int status, std::string body) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  status_ = status;
  body_ = std::move(body);
  done_ = true;
}

void AgentCall::send_event(std::string data) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  streaming_ = true;
  events_.push_back(std::move(data));
}

void AgentCall::end_stream() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  streaming_ = true;
  events_.push_back("[DONE]");
  done_ = true;
}

AgentCall::Answer AgentCall::wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &AgentCall::ready), timeout);
  Answer answer;
  answer.streaming = streaming_;
  answer.events.assign(events_.begin(), events_.end());
  events_.clear();
  answer.done = done_ && events_.empty();
  answer.status = status_;
  if (done_ && !streaming_) answer.body = body_;
  return answer;
}

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code) {
  core::Json error = core::Json::object();
  error.set("message", message);
  error.set("type", type);
  error.set("param", core::Json());
  error.set("code", code.empty() ? core::Json() : core::Json(code));
  core::Json body = core::Json::object();
  body.set("error", std::move(error));
  return body.dump();
}

}  // namespace flywheel::rollout::agent
