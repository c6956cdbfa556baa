#include "flywheel/rollout/worker/rollout_worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "group_assembly.h"
#include "worker_wait.h"
#include "worker_work.h"

namespace flywheel::rollout {

RolloutWorker::RolloutWorker(const RolloutWorkerOptions& options, const RolloutWorkerParts& parts)
    : options_(options),
      client_(parts.client),
      weights_(parts.weights),
      engine_(parts.engine),
      encoder_(parts.encoder),
      tokenizer_(parts.tokenizer),
      pool_(parts.pool) {
  if (parts.agents != nullptr) {
    runner_ = parts.agents;
    agents_ = true;
  } else if (parts.environment) {
    own_runner_ =
        std::make_unique<EpisodeRunner>(engine_, parts.environment, tokenizer_, options_.episodes);
    runner_ = own_runner_.get();
  }
}

RolloutWorker::~RolloutWorker() {
  {
    // Under both mutexes, so that no waiter checks stopping_ and then misses the signal.
    absl::MutexLock fetch_lock(&fetch_mu_);
    absl::MutexLock push_lock(&push_mu_);
    stopping_.store(true);
  }
  fetch_cv_.SignalAll();
  push_cv_.SignalAll();
  if (fetcher_.joinable()) fetcher_.join();
  if (pusher_.joinable()) pusher_.join();
}

RolloutWorkerStats RolloutWorker::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

absl::Status RolloutWorker::acquire(bool* done) {
  // Groups the engine can start now, less what is already waiting for it.
  // A greedy baseline takes one more slot; an engine of exactly group_size slots queues it.
  const int64_t per_group =
      std::min(options_.max_slots, options_.group_size + (options_.greedy_baseline ? 1 : 0));
  const int64_t free_slots =
      options_.max_slots -
      (agents_ ? runner_->running_episodes()
               : engine_->active_sequences() + engine_->queued_requests() * options_.group_size);
  const int64_t wanted = free_slots / per_group - static_cast<int64_t>(pending_.size());
  if (wanted < 1) return absl::OkStatus();
  FLYWHEEL_ASSIGN_OR_RETURN(v1::AcquireWorkReply reply, client_->acquire_work(wanted));
  if (reply.kind() == v1::AcquireWorkReply::DONE) {
    *done = true;
    return absl::OkStatus();
  }
  for (const v1::PromptLease& lease : reply.leases()) {
    const std::string where = absl::StrCat("prompt ", lease.prompt_index());
    absl::StatusOr<EncodedPrompt> prompt = encoder_->encode(lease.prompt_json(), where);
    if (!prompt.ok()) {
      // The prompt cannot be generated: the controller drops it (counted) rather than
      // re-issuing it to the next worker forever.
      FLYWHEEL_LOG_ERROR("%s; dropping it", prompt.status().message());
      (void)client_->release_lease(lease.lease_id(), /*drop=*/true);
      absl::MutexLock lock(&stats_mu_);
      ++stats_.leases_released;
      continue;
    }
    auto pending = std::make_unique<Pending>();
    pending->lease = lease;
    pending->prompt = std::move(*prompt);
    pending->grant_version = reply.version();
    pending_.push_back(std::move(pending));
  }
  return absl::OkStatus();
}

absl::Status RolloutWorker::submit_ready() {
  while (!pending_.empty()) {
    Pending& next = *pending_.front();
    // Generate only with weights at least as new as the grant's version: the controller's
    // grant rule then keeps the group within max_staleness when it is trained.
    absl::Status s = apply_weights(next.grant_version);
    if (!s.ok()) return s;
    if (applied_version_ < next.grant_version) return absl::OkStatus();  // training is over
    if (next.lease.partial_size() > 0 && !runner_ && !options_.greedy_baseline) {
      s = submit_resumed(next);
      pending_.pop_front();
      if (!s.ok()) return s;
      continue;
    }
    GenerationRequest request;
    request.id = std::to_string(next.lease.lease_id());
    request.prompt_ids = next.prompt.ids;
    request.sampling = options_.sampling;
    request.sampling.seed = options_.sampling.seed * 1000003u + next.lease.lease_id();
    request.n = options_.group_size;
    GenerationRequest greedy;
    if (options_.greedy_baseline) {
      greedy.id = request.id + kBaselineSuffix;
      greedy.prompt_ids = request.prompt_ids;
      greedy.sampling = request.sampling;
      greedy.sampling.temperature = 0;
      greedy.n = 1;
    }
    if (runner_) {
      EpisodeRequest episodes;
      episodes.id = request.id;
      episodes.prompt_ids = std::move(request.prompt_ids);
      episodes.record = next.prompt.record;
      episodes.sampling = request.sampling;
      episodes.n = request.n;
      s = runner_->submit(std::move(episodes));
    } else {
      s = engine_->submit(std::move(request));
    }
    if (s.ok() && options_.greedy_baseline) {
      s = engine_->submit(std::move(greedy));
      if (!s.ok()) (void)engine_->abort(std::to_string(next.lease.lease_id()));
    }
    if (!s.ok()) {
      // E.g. a prompt too long for the context: the controller drops it (counted).
      FLYWHEEL_LOG_ERROR("prompt %d: %s; dropping it", next.lease.prompt_index(), s.message());
      (void)client_->release_lease(next.lease.lease_id(), /*drop=*/true);
      absl::MutexLock lock(&stats_mu_);
      ++stats_.leases_released;
    } else {
      auto active = std::make_unique<Active>();
      active->lease = next.lease;
      active->prompt = std::move(next.prompt);
      active_[std::to_string(next.lease.lease_id())] = std::move(active);
    }
    pending_.pop_front();
  }
  return absl::OkStatus();
}

void RolloutWorker::collect_finished() {
  if (runner_) {
    for (EpisodeGroup& episodes : runner_->take_finished()) {
      auto it = active_.find(episodes.request_id);
      if (it == active_.end()) continue;
      std::unique_ptr<Active> active = std::move(it->second);
      active_.erase(it);
      std::vector<EpisodeSummary> summaries;
      active->group =
          std::make_unique<GroupResult>(as_group_result(std::move(episodes), &summaries));
      score_group(std::move(active), std::move(summaries));
    }
    return;
  }
  for (GroupResult& finished : engine_->take_finished()) {
    const size_t mark = finished.request_id.find(kResumedSample);
    if (mark != std::string::npos) {
      const std::string key = finished.request_id.substr(0, mark);
      const int64_t sample = std::atoll(finished.request_id.c_str() + mark + 1);
      collect_resumed(std::move(finished), key, sample);
      continue;
    }
    const bool is_baseline = absl::EndsWith(finished.request_id, kBaselineSuffix);
    const std::string key = is_baseline
                                ? finished.request_id.substr(
                                      0, finished.request_id.size() - std::strlen(kBaselineSuffix))
                                : finished.request_id;
    auto it = active_.find(key);
    if (it == active_.end()) continue;
    (is_baseline ? it->second->baseline : it->second->group) =
        std::make_unique<GroupResult>(std::move(finished));
    if (!it->second->group || (options_.greedy_baseline && !it->second->baseline)) continue;
    std::unique_ptr<Active> active = std::move(it->second);
    active_.erase(it);
    score_group(std::move(active), {});
  }
}

void RolloutWorker::score_group(std::unique_ptr<Active> active,
                                std::vector<EpisodeSummary> episodes) {
  GroupResult& result = *active->group;
  bool failed = static_cast<int64_t>(result.samples.size()) != options_.group_size;
  if (active->baseline) {
    failed = failed || active->baseline->samples.size() != 1;
    // Scored with the group, as its last sample; not pushed.
    for (Sample& sample : active->baseline->samples) {
      result.samples.push_back(std::move(sample));
    }
  }
  std::vector<rewards::OwnedSample> samples =
      samples_to_score(result, active->prompt, active->lease, *tokenizer_,
                       options_.sampling.stop_token_ids, episodes, &failed);
  {
    absl::MutexLock lock(&stats_mu_);
    for (const Sample& sample : result.samples) stats_.generated_tokens += model_tokens(sample);
    stats_.generated_tokens -= active->resumed_tokens;  // another worker's
    if (failed) ++stats_.leases_released;
  }
  if (runner_) {  // reported with the next group pushed (episode/env_errors)
    const int64_t errors =
        std::count_if(result.samples.begin(), result.samples.end(),
                      [](const Sample& s) { return s.finish_reason == FinishReason::kError; });
    absl::MutexLock lock(&push_mu_);
    env_errors_unreported_ += errors;
  }
  if (failed) {
    (void)client_->release_lease(active->lease.lease_id());  // the prompt is re-issued
    return;
  }
  ++scoring_;
  auto shared = std::make_shared<GroupResult>(std::move(result));
  auto lease = std::make_shared<v1::PromptLease>(active->lease);
  auto summaries = std::make_shared<std::vector<EpisodeSummary>>(std::move(episodes));
  const model::ModelConfig& config = engine_->model().config();
  const RouteShape routes{static_cast<int32_t>(config.num_moe_layers()),
                          static_cast<int32_t>(config.num_experts_per_tok), config.num_experts};
  pool_->submit(std::move(samples), [this, shared, lease, summaries,
                                     routes](std::vector<rewards::ScoredSample> scored) {
    buffer::TrajectoryGroup group =
        trajectory_group(options_.worker_id, *lease, *shared, scored, *summaries,
                         static_cast<size_t>(options_.group_size), routes);
    absl::MutexLock lock(&push_mu_);
    group.env_errors = std::exchange(env_errors_unreported_, 0);
    to_push_.push_back(std::move(group));
    --scoring_;
    push_cv_.SignalAll();
  });
}

bool RolloutWorker::generating() const { return runner_ ? !runner_->idle() : !engine_->idle(); }

void RolloutWorker::step_generation() {
  if (runner_) {
    runner_->step();
  } else {
    engine_->step();
  }
}

void RolloutWorker::abort_generation() {
  if (runner_) {
    runner_->abort_all();
    (void)runner_->take_finished();
  }
  engine_->abort_all();
  (void)engine_->take_finished();
}

void RolloutWorker::push_loop() {
  while (true) {
    std::vector<buffer::TrajectoryGroup> batch;
    {
      absl::MutexLock lock(&push_mu_);
      while (!stopping_.load() && to_push_.empty()) push_cv_.Wait(&push_mu_);
      if (to_push_.empty()) return;  // stopping
      const uint64_t tag = lease_tag_.load();
      int64_t dropped = 0;
      while (!to_push_.empty()) {
        if ((to_push_.front().lease_id >> 32) == tag) {
          batch.push_back(std::move(to_push_.front()));
        } else {
          ++dropped;  // its lease belongs to a controller that restarted since
        }
        to_push_.pop_front();
      }
      pushing_ = static_cast<int64_t>(batch.size());
      if (dropped > 0) {
        absl::MutexLock stats_lock(&stats_mu_);
        stats_.groups_dropped += dropped;
      }
      if (batch.empty()) {
        pushing_ = 0;
        push_cv_.SignalAll();
        continue;
      }
    }
    absl::StatusOr<std::vector<v1::PushAck>> acks = client_->push_groups(batch);
    std::vector<buffer::TrajectoryGroup> retry;
    if (acks.ok()) {
      for (size_t i = 0; i < acks->size() && i < batch.size(); ++i) {
        const v1::PushAck& ack = (*acks)[i];
        absl::MutexLock stats_lock(&stats_mu_);
        ++stats_.groups_pushed;
        if (ack.code() == 0) {
          if (ack.outcome() == "accepted" || ack.outcome() == "duplicate") ++stats_.groups_accepted;
          continue;
        }
        if (ack.code() == static_cast<int>(absl::StatusCode::kResourceExhausted)) {
          retry.push_back(std::move(batch[i]));  // the buffer is full: push it again later
          continue;
        }
        ++stats_.groups_rejected;
        FLYWHEEL_LOG_WARN("group %s rejected: %s", ack.group_id(), ack.message());
        if (ack.code() != static_cast<int>(absl::StatusCode::kFailedPrecondition)) {
          // Invalid as generated (e.g. too long for the buffer): generating it again would not
          // help, so the prompt is dropped (counted). A lease already gone needs nothing.
          (void)client_->release_lease(batch[i].lease_id, /*drop=*/true);
        }
      }
    }
    if (!retry.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    absl::MutexLock lock(&push_mu_);
    pushing_ = 0;
    if (!acks.ok()) {
      push_error_ = acks.status();
      push_cv_.SignalAll();
      return;
    }
    for (auto it = retry.rbegin(); it != retry.rend(); ++it) to_push_.push_front(std::move(*it));
    push_cv_.SignalAll();
  }
}

void RolloutWorker::give_back_leases() {
  abort_generation();
  for (const auto& [id, active] : active_) (void)client_->release_lease(active->lease.lease_id());
  for (const auto& pending : pending_) (void)client_->release_lease(pending->lease.lease_id());
  absl::MutexLock lock(&stats_mu_);
  stats_.leases_released += static_cast<int64_t>(active_.size() + pending_.size());
  active_.clear();
  pending_.clear();
}

absl::Status RolloutWorker::reset_for_restart() {
  lease_tag_.store(kNoLeases);  // nothing of the old leases is pushed from now on
  abort_generation();
  active_.clear();
  pending_.clear();
  {
    absl::MutexLock lock(&push_mu_);
    {
      absl::MutexLock stats_lock(&stats_mu_);
      stats_.groups_dropped += static_cast<int64_t>(to_push_.size());
      ++stats_.controller_restarts;
    }
    to_push_.clear();
    push_error_ = absl::OkStatus();  // the old controller's unreachability is history
  }
  FLYWHEEL_RETURN_IF_ERROR(engine_->reset_version(-1));
  {
    absl::MutexLock lock(&fetch_mu_);
    if (fetched_ && !spare_) spare_ = std::move(fetched_);
    fetched_.reset();
    fetched_version_ = -1;
    forget_fetched_ = true;
    fetch_error_ = absl::OkStatus();
  }
  applied_version_ = -1;
  acked_version_ = -1;
  return absl::OkStatus();
}

absl::Status RolloutWorker::run(const StopRequested& stop) {
  stop_ = stop ? stop : StopRequested([] { return false; });
  fetcher_ = std::thread([this] { fetch_loop(); });
  pusher_ = std::thread([this] { push_loop(); });
  absl::Status s;
  while (true) {
    s = loop();
    if (!buffer::ControllerClient::is_restart(s)) break;
    FLYWHEEL_LOG_WARN("%s; dropping the work in flight and registering again", s.message());
    s = reset_for_restart();
    if (!s.ok()) break;
  }
  const bool reachable =
      s.code() != absl::StatusCode::kUnavailable && s.code() != absl::StatusCode::kCancelled;
  if (reachable && s.ok() && stop_()) {
    hand_over_leases();  // a stop (a preempted node): what is half done is continued elsewhere
  } else if (reachable) {
    give_back_leases();  // the controller re-issues what was not generated at once
  } else {
    abort_generation();
  }
  // Groups still being scored are pushed (when the controller is there) before returning: the
  // scoring pool's callbacks use this worker.
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.drain_timeout_s);
  {
    absl::MutexLock lock(&push_mu_);
    wait_until(&push_cv_, &push_mu_, deadline, [&] {
      return scoring_.load() == 0 &&
             ((to_push_.empty() && pushing_ == 0) || !push_error_.ok() || !reachable);
    });
  }
  if (!reachable && client_->controller_done()) {
    // Told that training is over: a controller that has shut down since is no failure.
    FLYWHEEL_LOG_INFO("done; the controller has shut down (%s)", s.message());
    s = absl::OkStatus();
  } else if (!reachable) {
    FLYWHEEL_LOG_WARN("the controller is unreachable: %s", s.message());
  }
  if (s.ok() && !weights_finished_.load()) {
    // A broadcast transport: the learners send every version to every worker until they close
    // the channel, however long they still train on what is buffered.
    FLYWHEEL_LOG_INFO("done; receiving weights until the learners finish");
    while (!weights_finished_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return s;
}

absl::Status RolloutWorker::loop() {
  FLYWHEEL_ASSIGN_OR_RETURN(v1::RegisterReply registered, client_->register_worker());
  if (registered.group_size() != options_.group_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the controller expects groups of ", registered.group_size(),
                     " but rollout.group_size is ", options_.group_size));
  }
  lease_tag_.store(registered.incarnation());
  FLYWHEEL_LOG_INFO("registered with the controller at %s", client_->options().address);
  client_->start_heartbeats(std::max(0.05, registered.heartbeat_interval_s()));

  // The first weights, before anything is generated.
  absl::Status s = apply_weights(0);
  if (!s.ok()) return s;
  bool done = false;
  auto next_acquire = Clock::now();
  while (!stop_()) {
    {
      absl::MutexLock lock(&push_mu_);
      if (!push_error_.ok()) return push_error_;
    }
    if (!done && client_->controller_done()) {
      // Heard in a heartbeat while busy: what is being generated will not be trained on.
      FLYWHEEL_LOG_INFO("training is over; giving back %d leases",
                        active_.size() + pending_.size());
      done = true;
      give_back_leases();
    }
    if (client_->controller_restarted()) {
      return absl::AbortedError(absl::StrCat(buffer::kControllerRestarted, " (a heartbeat)"));
    }
    s = apply_weights(-1);  // whatever newer arrived, without waiting
    if (!s.ok()) return s;
    if (!done && Clock::now() >= next_acquire) {
      s = acquire(&done);
      if (!s.ok()) return s;
      if (pending_.empty()) {
        next_acquire = Clock::now() + std::chrono::milliseconds(5);  // nothing granted: wait
      }
    }
    s = submit_ready();
    if (!s.ok()) return s;
    if (generating()) {
      step_generation();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    maybe_acknowledge();
    collect_finished();
    if (done && !generating() && pending_.empty() && scoring_.load() == 0) {
      absl::MutexLock lock(&push_mu_);
      if (to_push_.empty() && pushing_ == 0) break;
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::rollout
