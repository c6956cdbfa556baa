#include "flywheel/rollout/agent/agent_runner.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent_call.h"
#include "agent_process.h"
#include "agent_server.h"
#include "chat_format.h"
#include "episode_stream.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "openai_response.h"
#include "top_logprobs.h"

namespace flywheel::rollout {
namespace {

using Clock = std::chrono::steady_clock;
using agent::AgentCall;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

std::string random_hex(int bytes) {
  std::random_device device;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", device() & 0xff);
  return out;
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

struct AgentRunner::Run {
  std::string id;
  std::string key;
  Group* group = nullptr;
  int64_t index = 0;
  std::unique_ptr<agent::AgentProcess> process;
  std::unique_ptr<agent::EpisodeStream> stream;
  Clock::time_point started;
  std::shared_ptr<AgentCall> call;  // in the engine
  std::string engine_id;
  int64_t prompt_tokens = 0;         // of the call in the engine
  std::vector<std::string> emitted;  // streaming: text sent so far, per choice
  int64_t requests = 0;
  int64_t tool_call_ids = 0;
  std::optional<double> reward;  // the agent's, when it reported one
  bool ended = false;
  Episode episode;
};

struct AgentRunner::Host {
  std::unique_ptr<agent::AgentProcess> process;
  std::string episode;  // the episode it runs (until its done line); "" = idle
  Clock::time_point since;
};

struct AgentRunner::Group {
  EpisodeRequest request;
  std::vector<std::unique_ptr<Run>> runs;
};

AgentRunner::AgentRunner(GenerationEngine* engine, const model::TokenizerSetup& tokenizers,
                         const AgentRunnerOptions& options)
    : engine_(engine), tokenizers_(tokenizers), options_(options) {}

absl::StatusOr<std::unique_ptr<AgentRunner>> AgentRunner::create(
    GenerationEngine* engine, const model::TokenizerSetup& tokenizers,
    const AgentRunnerOptions& options) {
  if (!options.agent.enabled()) return absl::InvalidArgumentError("rollout.agent.command: empty");
  std::unique_ptr<AgentRunner> runner(new AgentRunner(engine, tokenizers, options));
  runner->format_ =
      std::make_unique<agent::ChatFormat>(tokenizers.chat_template, options.agent.tool_format);
  if (!runner->format_->end_of_turn().empty()) {
    model::EncodeOptions encode;
    encode.add_special_tokens = false;
    absl::StatusOr<std::vector<int64_t>> ids =
        tokenizers.tokenizer->encode(runner->format_->end_of_turn(), encode);
    if (!ids.ok()) return ids.status();
    runner->end_of_turn_ids_ = *std::move(ids);
  }
  agent::AgentServerOptions server;
  server.host = options.agent.host;
  server.port = static_cast<int>(options.agent.port);
  server.max_request_bytes = options.agent.max_request_bytes;
  server.threads = static_cast<int>(options.agent.max_episodes) + 4;
  server.auth_token = options.auth_token;
  server.model_name = options.model_name;
  AgentRunner* self = runner.get();
  server.episode_of = [self](const std::string& key) -> std::optional<std::string> {
    absl::MutexLock lock(&self->mu_);
    auto it = self->keys_.find(key);
    if (it == self->keys_.end()) return std::nullopt;
    return it->second;
  };
  server.saturated = [self] {
    absl::MutexLock lock(&self->mu_);
    return self->queued_ + static_cast<int64_t>(self->inbox_.size()) >=
           self->options_.agent.max_queued_requests;
  };
  server.submit = [self](std::shared_ptr<AgentCall> call) {
    absl::MutexLock lock(&self->mu_);
    if (self->closing_) {
      call->respond(503, agent::error_body("the worker is stopping", "server_error"));
      return;
    }
    self->inbox_.push_back(std::move(call));
    self->calls_cv_.Signal();
  };
  absl::StatusOr<std::unique_ptr<agent::AgentServer>> started = agent::AgentServer::start(server);
  if (!started.ok()) return started.status();
  runner->server_ = *std::move(started);
  FLYWHEEL_LOG_INFO("agent endpoint at %s (rollout.agent.command: %s)", runner->base_url(),
                    options.agent.command.front());
  return runner;
}

AgentRunner::~AgentRunner() {
  abort_all();
  FLYWHEEL_LOG_INFO(
      "agents: %d episodes (%d runs of the agent started), %d requests (%d refused), %d agent "
      "errors, %d rewrites, %d replies discarded",
      stats_.episodes, stats_.agent_starts, stats_.requests, stats_.refused, stats_.agent_errors,
      stats_.rewrites, stats_.discarded_replies);
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;  // from now on calls are answered as they arrive
    for (const std::shared_ptr<AgentCall>& call : inbox_) {
      call->respond(503, agent::error_body("the worker is stopping", "server_error"));
    }
    inbox_.clear();
  }
  server_.reset();
}

std::string AgentRunner::base_url() const { return server_->base_url(); }

AgentRunnerStats AgentRunner::stats() const { return stats_; }

int64_t AgentRunner::running_episodes() const {
  int64_t n = 0;
  for (const auto& [id, group] : groups_) {
    for (const auto& run : group->runs) n += run->ended ? 0 : 1;
  }
  return n;
}

absl::Status AgentRunner::submit(EpisodeRequest request) {
  if (groups_.count(request.id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("episode group ", request.id, " exists"));
  }
  if (request.n < 1 || !request.record) {
    return absl::InvalidArgumentError("an agent group needs n >= 1 and a record");
  }
  auto group = std::make_unique<Group>();
  group->request = std::move(request);
  Group* g = group.get();
  const std::string stdin_line = absl::StrCat(g->request.record->dump(), "\n");
  const bool persistent = options_.agent.mode == core::AgentMode::kPersistent;
  for (int64_t i = 0; i < g->request.n; ++i) {
    auto run = std::make_unique<Run>();
    run->id = absl::StrCat(g->request.id, ".", i);
    run->key = absl::StrCat("fw-", run->id, "-", random_hex(16));
    run->group = g;
    run->index = i;
    run->started = Clock::now();
    agent::EpisodeStreamOptions stream;
    stream.tokenizer = tokenizers_.tokenizer.get();
    stream.format = format_.get();
    stream.end_of_turn_ids = end_of_turn_ids_;
    stream.stop_token_ids = options_.sampling.stop_token_ids;
    stream.max_new_tokens = options_.sampling.max_new_tokens;
    stream.drop_on_rewrite = options_.agent.on_rewrite == core::OnRewrite::kDrop;
    stream.max_segments = options_.agent.max_segments;
    run->stream = std::make_unique<agent::EpisodeStream>(stream);
    {
      absl::MutexLock lock(&mu_);
      keys_[run->key] = run->id;
    }
    Run& r = *run;
    g->runs.push_back(std::move(run));
    ++stats_.episodes;
    if (persistent) {
      waiting_.push_back(&r);
      continue;
    }
    agent::AgentProcessOptions process;
    process.command = options_.agent.command;
    process.working_dir = options_.working_dir;
    process.env = {
        {"OPENAI_BASE_URL", base_url()}, {"OPENAI_API_KEY", r.key}, {"FLYWHEEL_EPISODE_ID", r.id}};
    process.stdin_data = stdin_line;
    absl::StatusOr<std::unique_ptr<agent::AgentProcess>> started =
        agent::AgentProcess::start(process);
    if (!started.ok()) {
      end_run(r, FinishReason::kError, std::string(started.status().message()));
      continue;
    }
    ++stats_.agent_starts;
    r.process = *std::move(started);
  }
  groups_[g->request.id] = std::move(group);
  return absl::OkStatus();
}

AgentRunner::Run* AgentRunner::run_of(const std::string& episode_id) {
  const size_t dot = episode_id.rfind('.');
  if (dot == std::string::npos) return nullptr;
  auto it = groups_.find(episode_id.substr(0, dot));
  if (it == groups_.end()) return nullptr;
  for (auto& run : it->second->runs) {
    if (run->id == episode_id) return run.get();
  }
  return nullptr;
}

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

void AgentRunner::collect_engine() {
  for (GroupResult& result : engine_->take_finished()) {
    auto it = by_engine_id_.find(result.request_id);
    if (it == by_engine_id_.end()) continue;
    Run* run = it->second;
    by_engine_id_.erase(it);
    answer(*run, std::move(result));
  }
}

void AgentRunner::poll_processes() {
  const auto now = Clock::now();
  for (auto& [id, group] : groups_) {
    for (auto& run : group->runs) {
      if (run->ended || !run->process) continue;
      if (run->process->poll()) {
        if (run->process->succeeded()) {
          run->reward = run->process->reward();
          end_run(*run, FinishReason::kStop, "");
        } else {
          std::string tail = run->process->stderr_tail();
          end_run(*run, FinishReason::kError,
                  absl::StrCat("the agent ended with ", run->process->describe_exit(),
                               tail.empty() ? "" : "; its stderr ends: ", tail));
        }
      } else if (now - run->started > std::chrono::duration<double>(options_.agent.timeout_s)) {
        end_run(*run, FinishReason::kError,
                absl::StrCat("the agent ran past rollout.agent.timeout_s (",
                             options_.agent.timeout_s, " s) and was killed"));
      }
    }
  }
}

void AgentRunner::start_episodes() {
  while (!waiting_.empty()) {
    Run& run = *waiting_.front();
    Host* host = nullptr;
    for (auto& h : hosts_) {
      if (h->episode.empty()) host = h.get();
    }
    if (host == nullptr) {
      if (static_cast<int64_t>(hosts_.size()) >= options_.agent.max_episodes) return;
      agent::AgentProcessOptions process;
      process.command = options_.agent.command;
      process.working_dir = options_.working_dir;
      process.env = {{"OPENAI_BASE_URL", base_url()}, {"FLYWHEEL_AGENT_MODE", "persistent"}};
      process.keep_stdin_open = true;
      absl::StatusOr<std::unique_ptr<agent::AgentProcess>> started =
          agent::AgentProcess::start(process);
      waiting_.pop_front();
      if (!started.ok()) {
        end_run(run, FinishReason::kError, std::string(started.status().message()));
        continue;
      }
      ++stats_.agent_starts;
      hosts_.push_back(std::make_unique<Host>());
      host = hosts_.back().get();
      host->process = *std::move(started);
    } else {
      waiting_.pop_front();
    }
    if (run.ended) continue;  // aborted while it waited
    host->episode = run.id;
    host->since = Clock::now();
    run.started = host->since;
    core::Json line = core::Json::object();
    line.set("episode_id", run.id);
    line.set("api_key", run.key);
    line.set("base_url", base_url());
    line.set("record", *run.group->request.record);
    host->process->send(absl::StrCat(line.dump(), "\n"));
  }
}

void AgentRunner::poll_hosts() {
  const auto now = Clock::now();
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    Host& host = **it;
    const bool exited = host.process->poll();  // then every line it wrote has been read
    for (agent::EpisodeDone& done : host.process->take_done()) {
      if (done.episode_id != host.episode) {
        FLYWHEEL_LOG_WARN("agent: a done line for episode '%s', which this run does not hold",
                          done.episode_id);
        continue;
      }
      Run* run = run_of(host.episode);
      host.episode.clear();
      if (run == nullptr || run->ended) continue;  // ended already (budget, rewrite, abort)
      run->reward = done.reward;
      if (done.error) {
        end_run(*run, FinishReason::kError, absl::StrCat("the agent reported: ", *done.error));
      } else {
        end_run(*run, FinishReason::kStop, "");
      }
    }
    std::string why;
    if (exited) {
      const std::string tail = host.process->stderr_tail();
      why = absl::StrCat("the agent ended with ", host.process->describe_exit(),
                         tail.empty() ? "" : "; its stderr ends: ", tail);
    } else if (!host.episode.empty() &&
               now - host.since > std::chrono::duration<double>(options_.agent.timeout_s)) {
      why = absl::StrCat("the agent ran past rollout.agent.timeout_s (", options_.agent.timeout_s,
                         " s) and was killed");
    }
    if (why.empty()) {
      ++it;
      continue;
    }
    if (Run* run = host.episode.empty() ? nullptr : run_of(host.episode)) {
      end_run(*run, FinishReason::kError, why);
    } else if (exited) {
      FLYWHEEL_LOG_WARN("agent: an idle run ended: %s", why);
    }
    it = hosts_.erase(it);  // kills and reaps it
  }
}

void AgentRunner::end_run(Run& run, FinishReason reason, const std::string& error) {
  if (run.ended) return;
  run.ended = true;
  if (run.process) run.process->kill();
  if (run.call) {
    (void)engine_->abort(run.engine_id);
    by_engine_id_.erase(run.engine_id);
    run.call->respond(
        410, agent::error_body(absl::StrCat("the episode ended: ", error.empty() ? "done" : error),
                               "invalid_request_error", "episode_ended"));
    run.call.reset();
  }
  {
    absl::MutexLock lock(&mu_);
    keys_.erase(run.key);
  }
  const agent::EpisodeStreamStats& stream_stats = run.stream->stats();
  stats_.discarded_replies += stream_stats.discarded_replies;
  stats_.rewrites += stream_stats.rewrites;  // segments started (drop refusals are counted above)
  std::vector<agent::Segment> segments = run.stream->finish();
  Episode& e = run.episode;
  std::string why = error;
  if (segments.empty() && reason == FinishReason::kStop) {
    reason = FinishReason::kError;
    why = "the agent exited without a completion the episode could train on";
  }
  if (reason == FinishReason::kError) {
    ++stats_.agent_errors;
    FLYWHEEL_LOG_WARN("agent episode %s: %s", run.id, why);
  }
  for (size_t k = 0; k + 1 < segments.size(); ++k) {
    e.earlier_segments.push_back(std::move(static_cast<EpisodeSegment&>(segments[k])));
  }
  if (!segments.empty()) {
    agent::Segment& s = segments.back();
    e.sample = std::move(s.sample);
    e.prompt_ids = std::move(s.prompt_ids);
    e.turn_ends = std::move(s.turn_ends);
    e.turn_rewards.assign(e.turn_ends.size(), 0.0);
    e.step_seconds = std::move(s.step_seconds);
    e.tool_calls = s.tool_calls;
    e.final_message = std::move(s.last_content);
  }
  e.sample.finish_reason = reason;
  e.sample.error = why;
  if (reason == FinishReason::kStop) e.reported_reward = run.reward;
}

void AgentRunner::finish_groups() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = *it->second;
    const bool done = std::all_of(g.runs.begin(), g.runs.end(),
                                  [](const std::unique_ptr<Run>& r) { return r->ended; });
    if (!done) {
      ++it;
      continue;
    }
    EpisodeGroup out;
    out.request_id = g.request.id;
    out.prompt_ids = g.request.prompt_ids;
    for (auto& run : g.runs) out.episodes.push_back(std::move(run->episode));
    finished_.push_back(std::move(out));
    it = groups_.erase(it);  // reaps the processes
  }
}

void AgentRunner::step() {
  take_calls();
  if (!engine_->idle()) {
    engine_->step();
  } else {
    absl::MutexLock lock(&mu_);
    if (inbox_.empty()) calls_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(2));
  }
  stream_progress();
  collect_engine();
  if (options_.agent.mode == core::AgentMode::kPersistent) {
    poll_hosts();
    start_episodes();
  } else {
    poll_processes();
  }
  finish_groups();
  absl::MutexLock lock(&mu_);
  queued_ = engine_->queued_requests();
}

std::vector<EpisodeGroup> AgentRunner::take_finished() { return std::exchange(finished_, {}); }

void AgentRunner::abort_all() {
  for (auto& [id, group] : groups_) {
    for (auto& run : group->runs) end_run(*run, FinishReason::kAbort, "aborted");
  }
  groups_.clear();
  by_engine_id_.clear();
  waiting_.clear();
  // Persistent runs still in an episode are killed; idle ones stay for the next episodes.
  hosts_.erase(std::remove_if(hosts_.begin(), hosts_.end(),
                              [](const std::unique_ptr<Host>& h) { return !h->episode.empty(); }),
               hosts_.end());
}

}  // namespace flywheel::rollout
