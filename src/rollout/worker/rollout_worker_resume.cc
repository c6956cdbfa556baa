// RolloutWorker, continuing work across workers (issue 30): a group leased with another
// worker's partial samples is continued from them (submit_resumed, collect_resumed), and a
// stopping worker hands what it has begun back to the controller with its samples so far
// (hand_over_leases).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/rollout/worker/rollout_worker.h"
#include "group_assembly.h"
#include "worker_wait.h"
#include "worker_work.h"

namespace flywheel::rollout {
namespace {

// A sample of a partial generation as the engine would have returned it so far.
Sample sample_of(const v1::PartialSample& p) {
  Sample s;
  s.token_ids.assign(p.token_ids().begin(), p.token_ids().end());
  s.logprobs.assign(p.logprobs().begin(), p.logprobs().end());
  s.versions.assign(p.versions().begin(), p.versions().end());
  s.finish_reason = p.finish_reason() == "stop" ? FinishReason::kStop : FinishReason::kLength;
  return s;
}

// A sample so far as the controller keeps it: finished when it stopped or ran out of tokens.
v1::PartialSample partial_of(const Sample& s) {
  v1::PartialSample p;
  p.mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
  p.mutable_logprobs()->Add(s.logprobs.begin(), s.logprobs.end());
  p.mutable_versions()->Add(s.versions.begin(), s.versions.end());
  const bool finished =
      s.finish_reason == FinishReason::kStop || s.finish_reason == FinishReason::kLength;
  p.set_finished(finished);
  if (finished) p.set_finish_reason(finish_reason_name(s.finish_reason));
  return p;
}

// `more` generated after what `into` holds: its tokens appended, its end the sample's.
void append_sample(Sample* into, Sample more) {
  into->token_ids.insert(into->token_ids.end(), more.token_ids.begin(), more.token_ids.end());
  into->logprobs.insert(into->logprobs.end(), more.logprobs.begin(), more.logprobs.end());
  into->versions.insert(into->versions.end(), more.versions.begin(), more.versions.end());
  into->finish_reason = more.finish_reason;
  into->error = std::move(more.error);
}

}  // namespace

absl::Status RolloutWorker::submit_resumed(Pending& next) {
  const std::string key = std::to_string(next.lease.lease_id());
  auto active = std::make_unique<Active>();
  active->lease = next.lease;
  active->prompt = std::move(next.prompt);
  std::vector<std::string> submitted;
  for (int i = 0; i < next.lease.partial_size(); ++i) {
    const v1::PartialSample& p = next.lease.partial(i);
    Sample sample = sample_of(p);
    active->resumed_tokens += static_cast<int64_t>(sample.token_ids.size());
    const int64_t left =
        options_.sampling.max_new_tokens - static_cast<int64_t>(sample.token_ids.size());
    if (!p.finished() && left > 0) {
      GenerationRequest request;
      request.id = absl::StrCat(key, std::string(1, kResumedSample), i);
      request.prompt_ids = active->prompt.ids;
      request.prompt_ids.insert(request.prompt_ids.end(), sample.token_ids.begin(),
                                sample.token_ids.end());
      request.sampling = options_.sampling;
      request.sampling.max_new_tokens = left;
      request.sampling.seed = options_.sampling.seed * 1000003u + next.lease.lease_id() * 131u +
                              static_cast<uint64_t>(i);
      const std::string id = request.id;
      absl::Status s = engine_->submit(std::move(request));
      if (!s.ok()) {
        // E.g. a prompt and tokens too long for this worker's context: generated afresh
        // elsewhere.
        FLYWHEEL_LOG_WARN("prompt %d: cannot continue its samples (%s); giving it back",
                          next.lease.prompt_index(), s.message());
        for (const std::string& other : submitted) (void)engine_->abort(other);
        (void)engine_->take_finished();
        (void)client_->release_lease(next.lease.lease_id());
        absl::MutexLock lock(&stats_mu_);
        ++stats_.leases_released;
        return absl::OkStatus();
      }
      submitted.push_back(id);
      ++active->waiting;
    } else if (!p.finished()) {
      sample.finish_reason = FinishReason::kLength;  // its budget was spent
    }
    active->resumed.push_back(std::move(sample));
  }
  {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.groups_resumed;
    stats_.resumed_tokens += active->resumed_tokens;
  }
  if (active->waiting > 0) {
    active_[key] = std::move(active);
    return absl::OkStatus();
  }
  active->group = std::make_unique<GroupResult>();  // every sample had ended
  active->group->request_id = key;
  active->group->prompt_ids = active->prompt.ids;
  active->group->samples = std::move(active->resumed);
  score_group(std::move(active), {});
  return absl::OkStatus();
}

void RolloutWorker::collect_resumed(GroupResult finished, const std::string& key, int64_t sample) {
  auto it = active_.find(key);
  if (it == active_.end()) return;
  Active& active = *it->second;
  if (sample < 0 || sample >= static_cast<int64_t>(active.resumed.size())) return;
  Sample& into = active.resumed[static_cast<size_t>(sample)];
  if (finished.samples.size() == 1) {
    append_sample(&into, std::move(finished.samples[0]));
  } else {
    into.finish_reason = FinishReason::kAbort;  // aborted while queued: nothing added
  }
  if (--active.waiting > 0) return;
  std::unique_ptr<Active> done = std::move(it->second);
  active_.erase(it);
  done->group = std::make_unique<GroupResult>();
  done->group->request_id = key;
  done->group->prompt_ids = done->prompt.ids;
  done->group->samples = std::move(done->resumed);
  score_group(std::move(done), {});
}

void RolloutWorker::hand_over_leases() {
  for (const auto& pending : pending_) (void)client_->release_lease(pending->lease.lease_id());
  const int64_t not_started = static_cast<int64_t>(pending_.size());
  {
    absl::MutexLock lock(&stats_mu_);
    stats_.leases_released += not_started;
  }
  pending_.clear();
  if (runner_ || options_.greedy_baseline) {  // episodes and baselines start afresh elsewhere
    give_back_leases();
    return;
  }
  const auto until = Clock::now() + std::chrono::duration<double>(options_.finish_on_stop_s);
  while (generating() && !active_.empty() && Clock::now() < until) {
    step_generation();
    collect_finished();  // what finishes is scored and pushed as usual
  }
  // What is still generating stops where it is; the aborted requests come back with their
  // samples so far.
  for (const auto& [key, active] : active_) {
    if (active->resumed.empty()) {
      (void)engine_->abort(key);
      continue;
    }
    for (size_t i = 0; i < active->resumed.size(); ++i) {
      (void)engine_->abort(absl::StrCat(key, std::string(1, kResumedSample), i));
    }
  }
  for (GroupResult& aborted : engine_->take_finished()) {
    const size_t mark = aborted.request_id.find(kResumedSample);
    const std::string key = aborted.request_id.substr(0, mark);
    auto it = active_.find(key);
    if (it == active_.end()) continue;
    if (mark == std::string::npos) {
      it->second->group = std::make_unique<GroupResult>(std::move(aborted));
    } else if (aborted.samples.size() == 1) {
      const int64_t i = std::atoll(aborted.request_id.c_str() + mark + 1);
      if (i >= 0 && i < static_cast<int64_t>(it->second->resumed.size())) {
        append_sample(&it->second->resumed[static_cast<size_t>(i)], std::move(aborted.samples[0]));
      }
    }
  }
  int64_t handed = 0, tokens = 0;
  for (const auto& [key, active] : active_) {
    const std::vector<Sample>* samples = !active->resumed.empty()
                                             ? &active->resumed
                                             : (active->group ? &active->group->samples : nullptr);
    google::protobuf::RepeatedPtrField<v1::PartialSample> partial;
    const bool usable =
        samples != nullptr && static_cast<int64_t>(samples->size()) == options_.group_size &&
        std::none_of(samples->begin(), samples->end(),
                     [](const Sample& x) { return x.finish_reason == FinishReason::kError; });
    for (size_t i = 0; usable && i < samples->size(); ++i) {
      *partial.Add() = partial_of((*samples)[i]);
      tokens += static_cast<int64_t>((*samples)[i].token_ids.size());
    }
    absl::Status s = client_->release_lease(active->lease.lease_id(), /*drop=*/false, partial);
    if (!s.ok()) {
      FLYWHEEL_LOG_WARN("lease %d not handed back: %s", active->lease.lease_id(), s.message());
    }
    handed += partial.empty() ? 0 : 1;
  }
  const int64_t given_back = static_cast<int64_t>(active_.size()) - handed;
  FLYWHEEL_LOG_INFO(
      "stopping: %d group(s) handed back with their samples so far (%d tokens), %d "
      "lease(s) given back",
      handed, tokens, given_back + not_started);
  absl::MutexLock lock(&stats_mu_);
  stats_.groups_handed_over += handed;
  stats_.handed_over_tokens += tokens;
  stats_.leases_released += given_back;
  active_.clear();
}

}  // namespace flywheel::rollout
