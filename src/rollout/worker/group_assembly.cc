#include "group_assembly.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"

namespace flywheel::rollout {
namespace {

std::vector<int32_t> to_int32(const std::vector<int64_t>& v) {
  return std::vector<int32_t>(v.begin(), v.end());
}

std::vector<uint8_t> loss_mask(const Sample& sample) {
  if (sample.from_model.empty()) return std::vector<uint8_t>(sample.token_ids.size(), 1);
  return sample.from_model;
}

// An environment token takes the version of the model token before it (of the first model
// token when none is before it).
std::vector<int32_t> versions(const Sample& sample) {
  std::vector<int32_t> out(sample.versions.begin(), sample.versions.end());
  if (sample.from_model.empty()) return out;
  auto first = std::find(sample.from_model.begin(), sample.from_model.end(), uint8_t{1});
  int32_t last = first == sample.from_model.end() ? 0 : out[first - sample.from_model.begin()];
  for (size_t i = 0; i < out.size(); ++i) {
    if (sample.from_model[i]) {
      last = out[i];
    } else {
      out[i] = last;
    }
  }
  return out;
}

}  // namespace

std::vector<rewards::OwnedSample> samples_to_score(
    const GroupResult& result, const EncodedPrompt& prompt, const v1::PromptLease& lease,
    const model::Tokenizer& tokenizer, const std::vector<int64_t>& stop_token_ids,
    const std::vector<EpisodeSummary>& episodes, bool* failed) {
  std::vector<rewards::OwnedSample> samples;
  for (size_t i = 0; i < result.samples.size(); ++i) {
    const Sample& sample = result.samples[i];
    if (sample.finish_reason == FinishReason::kError ||
        sample.finish_reason == FinishReason::kAbort) {
      if (!sample.error.empty()) FLYWHEEL_LOG_WARN("generation failed: %s", sample.error);
      *failed = true;
    }
    std::vector<int64_t> ids = sample.token_ids;
    if (sample.finish_reason == FinishReason::kStop && !ids.empty() &&
        std::find(stop_token_ids.begin(), stop_token_ids.end(), ids.back()) !=
            stop_token_ids.end()) {
      ids.pop_back();  // the eos is not part of the text rewards see
    }
    rewards::OwnedSample owned;
    owned.record = prompt.record;
    owned.record_name = absl::StrCat("prompt ", lease.prompt_index());
    owned.prompt = prompt.text;
    const EpisodeSummary* episode = i < episodes.size() ? &episodes[i] : nullptr;
    absl::StatusOr<std::string> text = episode != nullptr && episode->final_message
                                           ? absl::StatusOr<std::string>(*episode->final_message)
                                           : tokenizer.decode(ids);
    if (!text.ok()) {
      FLYWHEEL_LOG_WARN("cannot decode a completion: %s", text.status().message());
      *failed = true;
    }
    owned.completion = text.ok() ? *text : std::string();
    owned.completion_ids = to_int32(sample.token_ids);
    owned.truncated = sample.finish_reason == FinishReason::kLength;
    samples.push_back(std::move(owned));
  }
  return samples;
}

namespace {

// `sample`'s routes on t, when they cover exactly t's prompt + response tokens.
void set_routes(const Sample& sample, const RouteShape& shape, buffer::Trajectory* t) {
  const size_t width = static_cast<size_t>(shape.layers) * static_cast<size_t>(shape.k);
  const size_t tokens = t->prompt_ids.size() + t->response_ids.size();
  if (width == 0 || sample.routes.size() != tokens * width) return;
  const int32_t bytes = shape.experts < 0xFF ? 1 : 2;
  t->route_layers = shape.layers;
  t->route_k = shape.k;
  t->route_bytes = bytes;
  t->routes.resize(sample.routes.size() * bytes);
  for (size_t i = 0; i < sample.routes.size(); ++i) {
    const uint16_t id = sample.routes[i];
    if (bytes == 1) {
      t->routes[i] = id == kNoRoute ? 0xFF : static_cast<uint8_t>(id);
    } else {
      t->routes[2 * i] = static_cast<uint8_t>(id & 0xFF);
      t->routes[2 * i + 1] = static_cast<uint8_t>(id >> 8);
    }
  }
}

}  // namespace

buffer::TrajectoryGroup trajectory_group(const std::string& worker_id, const v1::PromptLease& lease,
                                         const GroupResult& result,
                                         const std::vector<rewards::ScoredSample>& scored,
                                         const std::vector<EpisodeSummary>& episodes,
                                         size_t group_size, const RouteShape& routes) {
  buffer::TrajectoryGroup group;
  group.group_id = absl::StrCat(worker_id, "/", lease.lease_id());
  group.lease_id = lease.lease_id();
  group.worker_id = worker_id;
  group.prompt_index = lease.prompt_index();
  if (scored.size() > group_size) {
    group.has_baseline = true;
    group.baseline_reward = scored[group_size].reward;
  }
  for (size_t i = 0; i < group_size; ++i) {
    const Sample& sample = result.samples[i];
    buffer::Trajectory t;
    const bool own_prompt = i < episodes.size() && !episodes[i].prompt_ids.empty();
    t.prompt_ids = to_int32(own_prompt ? episodes[i].prompt_ids : result.prompt_ids);
    t.response_ids = to_int32(sample.token_ids);
    t.loss_mask = loss_mask(sample);
    t.logprobs = sample.logprobs;
    t.versions = versions(sample);
    t.reward = scored[i].reward;
    t.reward_breakdown = scored[i].parts;
    t.finish_reason = finish_reason_name(sample.finish_reason);
    t.sample_index = static_cast<int64_t>(i);
    // An agent's episode is its own token stream, not the engine's request: no routes.
    if (!own_prompt) set_routes(sample, routes, &t);
    if (i >= episodes.size()) {
      // Process rewards sit where their steps end; an end past the response (a function's
      // mistake) is paid at its last token rather than failing the group's validation.
      const int32_t n = static_cast<int32_t>(t.response_ids.size());
      for (size_t k = 0; k < scored[i].step_ends.size(); ++k) {
        const int32_t end = std::min(scored[i].step_ends[k], n);
        if (end < 1) continue;
        if (!t.step_ends.empty() && t.step_ends.back() >= end) {
          t.step_rewards.back() += scored[i].step_rewards[k];
          continue;
        }
        t.step_ends.push_back(end);
        t.step_rewards.push_back(scored[i].step_rewards[k]);
      }
      group.trajectories.push_back(std::move(t));
      continue;
    }
    const EpisodeSummary& e = episodes[i];
    if (e.reported_reward) {
      t.reward = *e.reported_reward;  // the agent's own verdict
      t.reward_breakdown = {{"agent", *e.reported_reward}};
    }
    for (double r : e.turn_rewards) t.reward += r;
    t.turn_ends = e.turn_ends;
    t.turn_rewards = e.turn_rewards;
    t.tool_calls = e.tool_calls;
    t.env_step_seconds = e.step_seconds;
    for (size_t k = 0; k < e.earlier_segments.size(); ++k) {
      const EpisodeSegment& s = e.earlier_segments[k];
      buffer::Trajectory earlier;
      earlier.prompt_ids = to_int32(s.prompt_ids);
      earlier.response_ids = to_int32(s.sample.token_ids);
      earlier.loss_mask = loss_mask(s.sample);
      earlier.logprobs = s.sample.logprobs;
      earlier.versions = versions(s.sample);
      earlier.reward = t.reward;
      earlier.reward_breakdown = t.reward_breakdown;
      earlier.finish_reason = finish_reason_name(s.sample.finish_reason);
      earlier.sample_index = t.sample_index;
      earlier.turn_ends = to_int32(s.turn_ends);
      earlier.turn_rewards.assign(s.turn_ends.size(), 0.0);
      earlier.tool_calls = static_cast<int32_t>(s.tool_calls);
      earlier.env_step_seconds.assign(s.step_seconds.begin(), s.step_seconds.end());
      earlier.segment = static_cast<int32_t>(k);
      group.trajectories.push_back(std::move(earlier));
    }
    t.segment = static_cast<int32_t>(e.earlier_segments.size());
    group.trajectories.push_back(std::move(t));
  }
  return group;
}

GroupResult as_group_result(EpisodeGroup group, std::vector<EpisodeSummary>* episodes) {
  GroupResult result;
  result.request_id = std::move(group.request_id);
  result.prompt_ids = std::move(group.prompt_ids);  // with the first observation
  episodes->clear();
  for (Episode& e : group.episodes) {
    EpisodeSummary summary;
    summary.turn_ends.assign(e.turn_ends.begin(), e.turn_ends.end());
    summary.turn_rewards = std::move(e.turn_rewards);
    summary.tool_calls = static_cast<int32_t>(e.tool_calls);
    summary.step_seconds.assign(e.step_seconds.begin(), e.step_seconds.end());
    summary.prompt_ids = std::move(e.prompt_ids);
    summary.reported_reward = e.reported_reward;
    summary.final_message = std::move(e.final_message);
    summary.earlier_segments = std::move(e.earlier_segments);
    episodes->push_back(std::move(summary));
    result.samples.push_back(std::move(e.sample));
  }
  return result;
}

int64_t model_tokens(const Sample& sample) {
  if (sample.from_model.empty()) return static_cast<int64_t>(sample.token_ids.size());
  return std::count(sample.from_model.begin(), sample.from_model.end(), uint8_t{1});
}

}  // namespace flywheel::rollout
