#include "flywheel/trainer/rl_loop.h"
#include "flywheel/core/status_macros.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"

namespace flywheel::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

namespace {

// A reward component of this name (a judge's call time) is reported as quantiles, not a mean.
constexpr char kLatencySuffix[] = "/latency_s";

// The p-quantile (nearest rank) of `v`, which it sorts.
double quantile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::map<std::string, double> episode_stats(const std::vector<buffer::TrajectoryGroup>& groups) {
  double episodes = 0, segments = 0, turns = 0, tool_calls = 0, model = 0, env = 0;
  double truncated = 0, errors = 0;
  std::vector<double> latencies;
  for (const buffer::TrajectoryGroup& g : groups) {
    errors += static_cast<double>(g.env_errors);
    const std::vector<buffer::Trajectory>& ts = g.trajectories;
    for (size_t k = 0; k < ts.size(); ++k) {
      const buffer::Trajectory& t = ts[k];
      if (t.turn_ends.empty()) continue;
      // An agent's episode may span several trajectories (segments); its last holds its end.
      episodes += t.segment == 0 ? 1 : 0;
      ++segments;
      const bool last_segment = k + 1 == ts.size() || ts[k + 1].segment == 0;
      turns += static_cast<double>(t.turn_ends.size());
      tool_calls += t.tool_calls;
      const double from_model = std::count(t.loss_mask.begin(), t.loss_mask.end(), uint8_t{1});
      model += from_model;
      env += static_cast<double>(t.loss_mask.size()) - from_model;
      truncated += last_segment && t.finish_reason == "length" ? 1 : 0;
      latencies.insert(latencies.end(), t.env_step_seconds.begin(), t.env_step_seconds.end());
    }
  }
  std::map<std::string, double> out;
  if (episodes == 0) return out;
  out["episode/turns/mean"] = turns / episodes;
  out["episode/segments/mean"] = segments / episodes;
  out["episode/tool_calls/mean"] = tool_calls / episodes;
  out["episode/model_tokens/mean"] = model / episodes;
  out["episode/env_tokens/mean"] = env / episodes;
  out["episode/truncated"] = truncated / episodes;
  out["episode/env_errors"] = errors;
  if (!latencies.empty()) {
    out["episode/step_latency_p50"] = quantile(latencies, 0.5);
    out["episode/step_latency_p99"] = quantile(latencies, 0.99);
  }
  return out;
}

}  // namespace

BatchStats batch_stats(const std::vector<buffer::TrajectoryGroup>& groups, int64_t version,
                       int64_t max_staleness) {
  BatchStats s;
  double n = 0;
  std::map<std::string, double> part_counts;
  std::map<std::string, std::vector<double>> latencies;  // "<label>/latency_s" parts
  for (const buffer::TrajectoryGroup& g : groups) {
    for (const buffer::Trajectory& t : g.trajectories) {
      ++n;
      const double length = static_cast<double>(t.response_ids.size());
      s.length_max = std::max(s.length_max, length);
      s.clip_ratio += t.finish_reason == "length" ? 1 : 0;
      s.tokens += static_cast<int64_t>(t.prompt_ids.size() + t.response_ids.size());
      const int64_t oldest = t.min_version();
      const double staleness =
          oldest == std::numeric_limits<int64_t>::max() ? 0.0 : double(version - oldest);
      s.staleness_mean += staleness;
      s.staleness_max = std::max(s.staleness_max, staleness);
      if (staleness > static_cast<double>(max_staleness)) ++s.violations;
      for (const auto& [name, value] : t.reward_breakdown) {
        if (absl::EndsWith(name, kLatencySuffix)) {
          latencies[name].push_back(value);
          continue;
        }
        s.reward_parts[name] += value;
        part_counts[name] += 1;
      }
    }
  }
  if (n > 0) {
    s.clip_ratio /= n;
    s.staleness_mean /= n;
  }
  for (auto& [name, value] : s.reward_parts) value /= part_counts[name];
  for (auto& [name, values] : latencies) {
    const std::string stem = name.substr(0, name.size() - std::strlen(kLatencySuffix));
    s.reward_parts[stem + "/latency_p50"] = quantile(values, 0.5);
    s.reward_parts[stem + "/latency_p99"] = quantile(values, 0.99);
  }
  s.episode = episode_stats(groups);
  return s;
}

RlLoop::RlLoop(const RlLoopOptions& options, PolicyStepper* policy, RlLoopHooks hooks)
    : options_(options), policy_(policy), hooks_(std::move(hooks)) {}

absl::Status RlLoop::save(int64_t step) {
  if (step == saved_step_ || !hooks_.save) return absl::OkStatus();
  absl::Status saved = hooks_.save(step, violations_);
  if (saved.ok()) saved_step_ = step;
  return saved;
}

absl::StatusOr<RlLoopResult> RlLoop::run(BatchSource& source, const StopRequested& stop) {
  violations_ = options_.violations;
  saved_step_ = options_.saved_step;
  auto log = [&](const std::string& name, double value, int64_t step) {
    if (hooks_.log) hooks_.log(name, value, step);
  };
  auto evaluate = [&](int64_t step) {
    return hooks_.evaluate ? hooks_.evaluate(step) : absl::OkStatus();
  };
  RlLoopResult result;
  result.first_step = policy_->version();
  FLYWHEEL_RETURN_IF_ERROR(evaluate(result.first_step));
  const auto start = Clock::now();
  while (policy_->version() < options_.total_steps) {
    const int64_t version = policy_->version();
    const auto step_start = Clock::now();
    // kWait comes back every few seconds while rank 0 waits, so that no rank sits in one
    // collective for longer than its timeout however slow generation is.
    absl::StatusOr<TrainingBatch> batch;
    do {
      batch = source.next(version, stop);
      if (!batch.ok()) return batch.status();
    } while (batch->kind == TrainingBatch::Kind::kWait);
    if (batch->kind == TrainingBatch::Kind::kStop) {
      result.stopped_by = "a stop request";
      break;
    }
    if (batch->kind == TrainingBatch::Kind::kExhausted) {
      result.stopped_by = "the end of the dataset (data.epochs)";
      break;
    }
    if (batch->kind == TrainingBatch::Kind::kNoProgress) {
      return absl::DeadlineExceededError(batch->why);
    }
    const double gen_s = seconds_since(step_start);
    const BatchStats stats = batch_stats(batch->groups, version, options_.max_staleness);
    violations_ += stats.violations;

    const auto update_start = Clock::now();
    FLYWHEEL_ASSIGN_OR_RETURN(Metrics m, policy_->step(batch->groups));
    const double update_s = seconds_since(update_start);
    const int64_t step = policy_->version();

    const auto sync_start = Clock::now();
    double sync_s = 0;
    if (hooks_.publish &&
        (step % options_.publish_every_steps == 0 || step == options_.total_steps)) {
      FLYWHEEL_RETURN_IF_ERROR(hooks_.publish(step));
      sync_s = seconds_since(sync_start);
    }
    if (hooks_.stepped) hooks_.stepped(step);  // after publishing: a grant at `step` finds them

    const double step_s = seconds_since(step_start);
    for (const auto& [name, value] : m) log(name, value, step);
    for (const auto& [name, value] : stats.reward_parts) log("reward/" + name, value, step);
    for (const auto& [name, value] : stats.episode) log(name, value, step);
    log("response_length/max", stats.length_max, step);
    log("response_length/clip_ratio", stats.clip_ratio, step);
    log("async/staleness_mean", stats.staleness_mean, step);
    log("async/staleness_max", stats.staleness_max, step);
    log("async/staleness_violations", static_cast<double>(violations_), step);
    log("timing_s/gen", gen_s, step);
    log("timing_s/update_actor", update_s, step);
    log("timing_s/weight_sync", sync_s, step);
    log("perf/time_per_step", step_s, step);
    log("perf/throughput", static_cast<double>(stats.tokens) / std::max(step_s, 1e-9), step);
    log("perf/elapsed_s", seconds_since(start), step);
    if (options_.eval_every_steps > 0 && step % options_.eval_every_steps == 0 &&
        step != options_.total_steps) {
      FLYWHEEL_RETURN_IF_ERROR(evaluate(step));
    }
    if (options_.checkpoint_every_steps > 0 && step % options_.checkpoint_every_steps == 0) {
      FLYWHEEL_RETURN_IF_ERROR(save(step));
    }
  }
  result.last_step = policy_->version();
  if (result.last_step > result.first_step) {
    FLYWHEEL_RETURN_IF_ERROR(evaluate(result.last_step));
  }
  FLYWHEEL_RETURN_IF_ERROR(save(result.last_step));
  result.violations = violations_;
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace flywheel::trainer
