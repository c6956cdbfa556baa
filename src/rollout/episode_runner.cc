#include "flywheel/rollout/episode_runner.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::rollout {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A call's result, handed over from the thread that ran it. Shared with that thread, so a call
// past its deadline may finish (or hang) after its caller gave up on it.
template <typename T>
struct Answer {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<T> result ABSL_GUARDED_BY(mu) = absl::UnknownError("no answer");
};

// Runs `call` (returning absl::StatusOr<T>) on a thread of its own; exceptions become errors.
template <typename T, typename Call>
std::shared_ptr<Answer<T>> launch(Call call) {
  auto answer = std::make_shared<Answer<T>>();
  std::thread([answer, call = std::move(call)]() mutable {
    absl::StatusOr<T> result = absl::UnknownError("no answer");
    try {
      result = call();
    } catch (const std::exception& e) {
      result = absl::InternalError(absl::StrCat("threw: ", e.what()));
    } catch (...) {
      result = absl::InternalError("threw a non-standard exception");
    }
    absl::MutexLock lock(&answer->mu);
    answer->result = std::move(result);
    answer->done = true;
  }).detach();
  return answer;
}

// The answer, or nullopt while there is none.
template <typename T>
std::optional<absl::StatusOr<T>> take(Answer<T>& answer) {
  absl::MutexLock lock(&answer.mu);
  if (!answer.done) return std::nullopt;
  return std::move(answer.result);
}

}  // namespace

// An environment step on its thread.
struct EpisodeRunner::Running {
  std::string request_id;
  int64_t sample = 0;
  std::shared_ptr<Answer<EnvironmentStep>> answer;
  Clock::time_point start, deadline;
};

struct EpisodeRunner::Group {
  EpisodeRequest request;
  std::vector<std::shared_ptr<EpisodeState>> states;  // shared with steps in flight
  std::vector<Episode> episodes;  // the runner's part: turns, rewards, tool calls, errors
  std::vector<int64_t> length;    // tokens after the prompt so far, per episode
  std::vector<uint8_t> ended;     // the runner ended it; its finish_reason is the runner's
  std::vector<std::vector<int64_t>> turn_tail;  // the last model turn's final tokens (markers)
};

int64_t EpisodeRunner::running_episodes() const {
  int64_t n = 0;
  for (const auto& [id, group] : groups_) n += group->request.n;
  return n;
}

EpisodeRunner::EpisodeRunner(GenerationEngine* engine,
                             std::shared_ptr<const Environment> environment,
                             const model::Tokenizer* tokenizer, const EpisodeOptions& options)
    : engine_(engine),
      environment_(std::move(environment)),
      tokenizer_(tokenizer),
      options_(options) {}

EpisodeRunner::~EpisodeRunner() = default;

absl::StatusOr<std::vector<int64_t>> EpisodeRunner::observation_ids(
    const Observation& observation) const {
  if (!observation.text.empty() && !observation.token_ids.empty()) {
    return absl::InvalidArgumentError("the observation has both text and token ids");
  }
  std::vector<int64_t> ids = observation.token_ids;
  if (!observation.text.empty()) {
    if (tokenizer_ == nullptr) {
      return absl::InvalidArgumentError("a text observation needs a tokenizer");
    }
    // Bytes bound the tokens from above (a token holds at least one byte): a huge reply is
    // refused before it is tokenized.
    const int64_t bytes = static_cast<int64_t>(observation.text.size());
    if (bytes > 64 * options_.max_observation_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("the observation of ", bytes,
                                                     " bytes is too long (max_observation_tokens ",
                                                     options_.max_observation_tokens, ")"));
    }
    model::EncodeOptions encode;
    encode.add_special_tokens = false;
    absl::StatusOr<std::vector<int64_t>> encoded = tokenizer_->encode(observation.text, encode);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the observation cannot be tokenized: ", encoded.status().message()));
    }
    ids = std::move(*encoded);
  }
  if (static_cast<int64_t>(ids.size()) > options_.max_observation_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the observation of ", ids.size(), " tokens is longer than max_observation_tokens (",
        options_.max_observation_tokens, ")"));
  }
  return ids;
}

absl::Status EpisodeRunner::submit(EpisodeRequest request) {
  if (request.record == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("episodes '", request.id, "': no record"));
  }
  if (groups_.count(request.id)) {
    return absl::AlreadyExistsError(absl::StrCat("episodes '", request.id, "' already run"));
  }
  if (request.n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("episodes '", request.id, "': n must be >= 1, got ", request.n));
  }
  auto group = std::make_unique<Group>();
  const int64_t n = request.n;
  std::vector<int64_t> first_observation;
  for (int64_t i = 0; i < n; ++i) {
    auto where = [&](absl::string_view problem) {
      return absl::InvalidArgumentError(
          absl::StrCat("episode ", i, " of '", request.id, "': reset: ", problem));
    };
    std::shared_ptr<const Environment> env = environment_;
    std::shared_ptr<const core::Json> record = request.record;
    auto answer = launch<EpisodeStart>([env, record] { return env->reset(*record); });
    absl::StatusOr<EpisodeStart> start = absl::DeadlineExceededError("");
    {
      absl::MutexLock lock(&answer->mu);
      if (!answer->mu.AwaitWithTimeout(absl::Condition(&answer->done),
                                       absl::Seconds(options_.step_timeout_s))) {
        ++stats_.env_timeouts;
        return where(
            absl::StrCat("no answer within step_timeout_s (", options_.step_timeout_s, " s)"));
      }
      start = std::move(answer->result);
    }
    if (!start.ok()) {
      ++stats_.env_errors;
      return where(start.status().message());
    }
    absl::StatusOr<std::vector<int64_t>> ids = observation_ids(start->observation);
    if (!ids.ok()) {
      ++stats_.env_errors;
      return where(ids.status().message());
    }
    // The group shares its prompt: one first observation for all of it.
    if (i == 0) {
      first_observation = std::move(*ids);
    } else if (*ids != first_observation) {
      return where("the episodes of one prompt must start with the same observation");
    }
    group->states.push_back(std::shared_ptr<EpisodeState>(std::move(start->state)));
  }
  GenerationRequest engine_request;
  engine_request.id = request.id;
  engine_request.prompt_ids = request.prompt_ids;
  engine_request.prompt_ids.insert(engine_request.prompt_ids.end(), first_observation.begin(),
                                   first_observation.end());
  engine_request.sampling = request.sampling;
  for (const std::string& stop : environment_->turn_stop_strings()) {
    engine_request.sampling.stop_strings.push_back(stop);
  }
  engine_request.n = n;
  engine_request.multi_turn = true;
  engine_request.turn_max_new_tokens = options_.turn_max_new_tokens;
  FLYWHEEL_RETURN_IF_ERROR(engine_->submit(std::move(engine_request)));
  group->episodes.resize(n);
  group->length.assign(n, 0);
  group->ended.assign(n, 0);
  group->turn_tail.resize(n);
  request.prompt_ids.insert(request.prompt_ids.end(), first_observation.begin(),
                            first_observation.end());
  group->request = std::move(request);
  groups_[group->request.id] = std::move(group);
  return absl::OkStatus();
}

void EpisodeRunner::start_step(Group& group, int64_t sample, TurnEnd end) {
  Episode& episode = group.episodes[sample];
  group.length[sample] += static_cast<int64_t>(end.token_ids.size());
  episode.turn_ends.push_back(group.length[sample]);
  episode.turn_rewards.push_back(0);
  ModelTurn turn;
  turn.index = episode.turns() - 1;
  turn.truncated = end.reason == FinishReason::kLength;
  if (tokenizer_ != nullptr) {
    absl::StatusOr<std::string> text = tokenizer_->decode(end.token_ids);
    if (!text.ok()) {
      ++stats_.env_errors;
      end_episode(group, sample, FinishReason::kError,
                  absl::StrCat("cannot decode the model's turn: ", text.status().message()));
      return;
    }
    turn.text = std::move(*text);
  }
  turn.token_ids = std::move(end.token_ids);
  const size_t tail = std::min(turn.token_ids.size(), options_.markers.end_of_turn.size());
  group.turn_tail[sample].assign(turn.token_ids.end() - static_cast<int64_t>(tail),
                                 turn.token_ids.end());
  auto running = std::make_unique<Running>();
  running->request_id = group.request.id;
  running->sample = sample;
  running->start = Clock::now();
  running->deadline = running->start + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.step_timeout_s));
  std::shared_ptr<const Environment> env = environment_;
  std::shared_ptr<EpisodeState> state = group.states[sample];
  try {
    running->answer = launch<EnvironmentStep>(
        [env, state, turn = std::move(turn)] { return env->step(state.get(), turn); });
  } catch (const std::exception& e) {  // no thread could be started
    ++stats_.env_errors;
    end_episode(group, sample, FinishReason::kError,
                absl::StrCat("cannot start an environment step: ", e.what()));
    return;
  }
  running_.push_back(std::move(running));
}

void EpisodeRunner::answer(Group& group, int64_t sample, absl::StatusOr<EnvironmentStep> step,
                           double seconds) {
  Episode& episode = group.episodes[sample];
  if (!step.ok()) {
    ++stats_.env_errors;
    end_episode(group, sample, FinishReason::kError,
                absl::StrCat("environment step failed: ", step.status().message()));
    return;
  }
  ++stats_.env_steps;
  episode.step_seconds.push_back(seconds);
  episode.turn_rewards.back() = step->reward;
  episode.tool_calls += step->tool_call ? 1 : 0;
  if (step->done) {
    end_episode(group, sample, FinishReason::kStop, "");
    return;
  }
  if (episode.turns() >= options_.max_turns) {
    end_episode(group, sample, FinishReason::kLength, "");
    return;
  }
  absl::StatusOr<std::vector<int64_t>> ids = observation_ids(step->observation);
  if (!ids.ok()) {
    ++stats_.env_errors;
    end_episode(group, sample, FinishReason::kError, std::string(ids.status().message()));
    return;
  }
  if (!step->observation.text.empty() && !options_.markers.empty()) {
    *ids = options_.markers.wrap(*ids, group.turn_tail[sample]);
  }
  absl::Status s = engine_->continue_sample(group.request.id, sample, *ids);
  if (s.code() == absl::StatusCode::kOutOfRange) {  // no room for another turn
    end_episode(group, sample, FinishReason::kLength, "");
    return;
  }
  if (!s.ok()) {
    ++stats_.env_errors;
    end_episode(group, sample, FinishReason::kError, std::string(s.message()));
    return;
  }
  group.length[sample] += static_cast<int64_t>(ids->size());
}

void EpisodeRunner::end_episode(Group& group, int64_t sample, FinishReason reason,
                                const std::string& error) {
  group.ended[sample] = 1;
  group.episodes[sample].sample.finish_reason = reason;
  group.episodes[sample].sample.error = error;
  (void)engine_->end_sample(group.request.id, sample, reason);  // NotFound: the engine ended it
}

void EpisodeRunner::collect_steps() {
  const Clock::time_point now = Clock::now();
  std::vector<std::unique_ptr<Running>> still;
  for (std::unique_ptr<Running>& running : running_) {
    auto it = groups_.find(running->request_id);
    if (it == groups_.end()) continue;  // aborted meanwhile
    std::optional<absl::StatusOr<EnvironmentStep>> step = take(*running->answer);
    if (step) {
      answer(*it->second, running->sample, std::move(*step), seconds_since(running->start));
    } else if (now >= running->deadline) {
      ++stats_.env_timeouts;
      end_episode(*it->second, running->sample, FinishReason::kError,
                  absl::StrCat("the environment step took longer than step_timeout_s (",
                               options_.step_timeout_s, " s)"));
    } else {
      still.push_back(std::move(running));
    }
  }
  running_ = std::move(still);
}

void EpisodeRunner::collect_finished() {
  for (GroupResult& result : engine_->take_finished()) {
    auto it = groups_.find(result.request_id);
    if (it == groups_.end()) continue;
    Group& group = *it->second;
    EpisodeGroup out;
    out.request_id = result.request_id;
    out.prompt_ids = group.request.prompt_ids;
    out.episodes = std::move(group.episodes);
    for (size_t i = 0; i < out.episodes.size(); ++i) {
      Episode& episode = out.episodes[i];
      if (i >= result.samples.size()) {  // aborted in the queue
        episode.sample.finish_reason = FinishReason::kAbort;
        continue;
      }
      // The runner's reason for the episodes it ended; the engine's for the others.
      const FinishReason reason = episode.sample.finish_reason;
      std::string error = std::move(episode.sample.error);
      episode.sample = std::move(result.samples[i]);
      if (group.ended[i]) {
        episode.sample.finish_reason = reason;
        episode.sample.error = std::move(error);
      }
      // A turn the engine cut (the episode's token budget) still counts as a turn.
      const int64_t total = static_cast<int64_t>(episode.sample.token_ids.size());
      if (total > (episode.turn_ends.empty() ? 0 : episode.turn_ends.back())) {
        episode.turn_ends.push_back(total);
        episode.turn_rewards.push_back(0);
      }
    }
    stats_.episodes += static_cast<int64_t>(out.episodes.size());
    finished_.push_back(std::move(out));
    groups_.erase(it);
  }
}

void EpisodeRunner::step() {
  const int64_t computed = engine_->stats().computed_tokens;
  engine_->step();
  collect_steps();
  for (TurnEnd& end : engine_->take_turn_ends()) {
    auto it = groups_.find(end.request_id);
    if (it == groups_.end()) continue;
    const int64_t sample = end.sample;
    start_step(*it->second, sample, std::move(end));
  }
  collect_finished();
  // Every episode waits for its environment: do not spin.
  if (engine_->stats().computed_tokens == computed && !running_.empty()) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::vector<EpisodeGroup> EpisodeRunner::take_finished() {
  std::vector<EpisodeGroup> out = std::move(finished_);
  finished_.clear();
  return out;
}

void EpisodeRunner::abort_all() {
  running_.clear();  // their threads finish on their own
  engine_->abort_all();
  (void)engine_->take_turn_ends();
  collect_finished();
}

}  // namespace flywheel::rollout
