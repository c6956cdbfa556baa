// AgentRunner's model calls (agent_runner.h): the agents' requests taken from the endpoint,
// started in the engine, streamed back as they generate, and answered when done.
#include "flywheel/rollout/agent/agent_runner.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent_call.h"
#include "agent_runner_state.h"
#include "agent_server.h"
#include "chat_format.h"
#include "episode_stream.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "openai_response.h"
#include "top_logprobs.h"

namespace flywheel::rollout {
namespace {

using agent::AgentCall;

double now_s() {
  return std::chrono::duration<double>(AgentClock::now().time_since_epoch()).count();
}

// Cuts `text` at the first of `stops`; *cut gets what was cut off. False when none occurs.
bool cut_at_stop(const std::vector<std::string>& stops, std::string* text, std::string* cut) {
  size_t at = std::string::npos;
  for (const std::string& stop : stops) at = std::min(at, text->find(stop));
  if (at == std::string::npos) return false;
  *cut = text->substr(at);
  text->resize(at);
  return true;
}

}  // namespace

void AgentRunner::take_calls() {
  std::vector<std::shared_ptr<AgentCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    calls.swap(inbox_);
  }
  for (std::shared_ptr<AgentCall>& call : calls) {
    ++stats_.requests;
    Run* run = run_of(call->episode_id());
    if (run == nullptr || run->ended) {
      call->respond(401, agent::error_body("this episode has ended", "invalid_request_error",
                                           "invalid_api_key"));
      continue;
    }
    if (run->call) {
      // One conversation, one request at a time: a new request means the client gave up on
      // the one in flight (it timed out, or dropped a stream), which is cancelled.
      (void)engine_->abort(run->engine_id);
      by_engine_id_.erase(run->engine_id);
      run->call->respond(409, agent::error_body("superseded by a newer request of this episode",
                                                "invalid_request_error", "superseded"));
      run->call.reset();
      run->engine_id.clear();
    }
    start_call(*run, std::move(call));
  }
}

void AgentRunner::start_call(Run& run, std::shared_ptr<AgentCall> call) {
  const agent::CompletionRequest& r = call->request();
  auto refuse = [&](int status, const std::string& message, const std::string& code) {
    ++stats_.refused;
    call->respond(status, agent::error_body(message, "invalid_request_error", code));
  };
  if (r.n > options_.max_slots) {
    refuse(400, absl::StrCat("n: at most ", options_.max_slots, " (rollout.max_slots)"), "");
    return;
  }
  absl::StatusOr<agent::TurnPlan> plan = run.stream->plan(r, now_s());
  if (!plan.ok()) {
    const std::string message(plan.status().message());
    if (plan.status().code() == absl::StatusCode::kOutOfRange) {
      refuse(400, message, "context_length_exceeded");
      end_run(run, FinishReason::kLength, message);
    } else if (plan.status().code() == absl::StatusCode::kFailedPrecondition) {
      ++stats_.rewrites;
      refuse(400, message, "history_rewritten");
      end_run(run, FinishReason::kError, message);
    } else {
      refuse(400, message, "");
    }
    return;
  }
  GenerationRequest g;
  g.id = absl::StrCat(run.id, "#", run.requests++);
  g.prompt_ids = plan->prompt_ids;
  g.sampling = options_.sampling;
  if (options_.agent.request_sampling) {
    if (r.temperature) g.sampling.temperature = *r.temperature;
    if (r.top_p) g.sampling.top_p = *r.top_p;
  }
  g.sampling.max_new_tokens = std::min(plan->max_new_tokens, r.max_tokens.value_or(INT64_MAX));
  for (const std::string& stop : r.stop) g.sampling.stop_strings.push_back(stop);
  if (r.chat && r.parse_tools) {
    for (std::string& stop : format_->stop_strings(r.tools)) {
      g.sampling.stop_strings.push_back(std::move(stop));
    }
  }
  g.sampling.seed =
      r.seed ? *r.seed : options_.sampling.seed * 1000003u + std::hash<std::string>()(g.id);
  g.n = r.n;
  absl::Status s = engine_->submit(g);
  if (!s.ok()) {
    refuse(400, std::string(s.message()),
           absl::StrContains(s.message(), "long") ? "context_length_exceeded" : "");
    return;
  }
  run.prompt_tokens = static_cast<int64_t>(plan->prompt_ids.size());
  run.call = std::move(call);
  run.engine_id = g.id;
  run.emitted.assign(static_cast<size_t>(r.n), "");
  by_engine_id_[g.id] = &run;
}

void AgentRunner::stream_progress() {
  for (auto& [id, run] : by_engine_id_) {
    const std::shared_ptr<AgentCall>& call = run->call;
    if (call->cancelled()) {
      (void)engine_->abort(id);
      continue;
    }
    const agent::CompletionRequest& r = call->request();
    if (!r.stream || (r.chat && r.parse_tools && !r.tools.empty())) continue;  // tools: at the end
    agent::ResponseHead head{absl::StrCat(r.chat ? "chatcmpl-" : "cmpl-", id), r.model,
                             static_cast<int64_t>(std::time(nullptr)), r.chat, r.logprobs};
    size_t hold = 0;
    for (const std::string& stop : r.stop) hold = std::max(hold, stop.size());
    for (int64_t i = 0; i < r.n; ++i) {
      const Sample* sample = engine_->progress(id, i);
      if (sample == nullptr || sample->token_ids.empty()) continue;
      Sample copy;
      copy.token_ids = sample->token_ids;
      copy.finish_reason = FinishReason::kStop;  // an eos at the end is not text
      absl::StatusOr<std::string> text = run->stream->reply_text(copy);
      if (!text.ok()) continue;
      std::string shown = *text;
      // Not yet: a character still being written, or a stop sequence perhaps beginning.
      while (absl::EndsWith(shown, "\xEF\xBF\xBD")) shown.resize(shown.size() - 3);
      shown.resize(shown.size() - std::min(shown.size(), hold > 0 ? hold - 1 : 0));
      std::string& emitted = run->emitted[static_cast<size_t>(i)];
      if (shown.size() <= emitted.size() || !absl::StartsWith(shown, emitted)) continue;
      std::string cut;
      cut_at_stop(r.stop, &shown,
                  &cut);  // a stop sequence written in full: the text ends before it
      if (shown.size() <= emitted.size()) continue;
      call->send_event(agent::chunk_json(head, i, shown.substr(emitted.size()),
                                         emitted.empty() && r.chat, nullptr)
                           .dump());
      emitted = shown;
    }
  }
}

void AgentRunner::answer(Run& run, GroupResult result) {
  std::shared_ptr<AgentCall> call = std::move(run.call);
  run.call.reset();
  run.engine_id.clear();
  const agent::CompletionRequest& r = call->request();
  if (call->cancelled()) {
    call->respond(499, agent::error_body("the client closed the request", "invalid_request_error"));
    return;
  }
  std::vector<agent::Reply> replies;
  std::vector<agent::ChoiceOut> choices;
  const model::Tokenizer& tokenizer = *tokenizers_.tokenizer;
  for (Sample& sample : result.samples) {
    if (sample.finish_reason == FinishReason::kError ||
        sample.finish_reason == FinishReason::kAbort) {
      call->respond(500, agent::error_body(absl::StrCat("generation failed: ", sample.error),
                                           "server_error"));
      return;
    }
    absl::StatusOr<std::string> text = run.stream->reply_text(sample);
    if (!text.ok()) {
      call->respond(500, agent::error_body(std::string(text.status().message()), "server_error"));
      return;
    }
    agent::Reply reply;
    agent::ChoiceOut choice;
    std::string shown = *text;
    const bool stopped = cut_at_stop(r.stop, &shown, &reply.cut);
    choice.finish_reason =
        sample.finish_reason == FinishReason::kLength && !stopped ? "length" : "stop";
    if (r.chat) {
      agent::ParsedReply parsed =
          r.parse_tools ? format_->parse_reply(shown, r.tools) : agent::ParsedReply{shown, {}};
      reply.message.role = "assistant";
      reply.message.content = std::move(parsed.content);
      reply.message.tool_calls = std::move(parsed.tool_calls);
      for (agent::ToolCall& tool_call : reply.message.tool_calls) {
        tool_call.id = absl::StrCat("call_", run.tool_call_ids++);
      }
      if (!reply.message.tool_calls.empty()) choice.finish_reason = "tool_calls";
      choice.message = reply.message;
    } else {
      reply.text = shown;
      choice.text = shown;
    }
    choice.tokens = static_cast<int64_t>(sample.token_ids.size());
    if (r.logprobs) {
      std::vector<std::vector<std::pair<int64_t, float>>> top;
      if (r.top_logprobs > 0) {
        std::vector<int64_t> prompt(result.prompt_ids.begin(), result.prompt_ids.end());
        top = agent::top_logprobs(engine_->model(), prompt, sample.token_ids, r.top_logprobs,
                                  options_.sampling.temperature);
      }
      for (size_t t = 0; t < sample.token_ids.size(); ++t) {
        agent::TokenLogprob lp;
        lp.token = tokenizer.decode({sample.token_ids[t]}).value_or("");
        lp.logprob = sample.logprobs[t];
        if (t < top.size()) {
          for (const auto& [id, value] : top[t]) {
            lp.top.emplace_back(tokenizer.decode({id}).value_or(""), value);
          }
        }
        choice.logprobs.push_back(std::move(lp));
      }
    }
    reply.sample = std::move(sample);
    replies.push_back(std::move(reply));
    choices.push_back(std::move(choice));
  }
  run.stream->record(std::move(replies), now_s());
  agent::ResponseHead head{absl::StrCat(r.chat ? "chatcmpl-" : "cmpl-", result.request_id), r.model,
                           static_cast<int64_t>(std::time(nullptr)), r.chat, r.logprobs};
  if (!r.stream) {
    call->respond(200, agent::response_json(head, choices, run.prompt_tokens).dump());
    return;
  }
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& full = r.chat ? choices[i].message.content : choices[i].text;
    const std::string& emitted = run.emitted[i];
    const std::string rest =
        absl::StartsWith(full, emitted) ? full.substr(emitted.size()) : std::string();
    call->send_event(agent::chunk_json(head, static_cast<int64_t>(i), rest,
                                       emitted.empty() && r.chat, &choices[i])
                         .dump());
    completion_tokens += choices[i].tokens;
  }
  if (r.include_usage) {
    call->send_event(agent::usage_chunk_json(head, run.prompt_tokens, completion_tokens).dump());
  }
  call->end_stream();
}

}  // namespace flywheel::rollout
