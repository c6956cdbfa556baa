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

std::string random_hex(int bytes) {
  std::random_device device;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", device() & 0xff);
  return out;
}

}  // namespace

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
    run->started = AgentClock::now();
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
  const auto now = AgentClock::now();
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
    host->since = AgentClock::now();
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
  const auto now = AgentClock::now();
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
