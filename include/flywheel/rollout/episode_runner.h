// Runs multi-turn episodes on a GenerationEngine with an Environment, one exact token stream per
// episode: the model's tokens exactly as sampled, each observation tokenized once on its own and
// appended, the history never re-tokenized and never recomputed (the engine keeps each
// episode's KV cache between turns; engine.h, multi_turn).
//
//   EpisodeRunner runner(&engine, environment, tokenizer, options);
//   runner.submit({"lease-7", prompt_ids, record, sampling, /*n=*/8});
//   while (!runner.idle()) runner.step();
//   for (EpisodeGroup& group : runner.take_finished()) ...
//
// The episodes of a group and of many groups run concurrently through the engine's continuous
// batching. Environment steps run on their own threads with a deadline (step_timeout_s), so a
// slow step delays only its episode; a step that throws, fails, passes its deadline or answers
// with an observation that is too long, not UTF-8 or not in the vocabulary ends its episode with
// finish_reason kError (counted), and the runner goes on.
//
// Threading: one thread drives the runner (and its engine); environments see concurrent calls
// for different episodes, never two for one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/json.h"
#include "flywheel/core/options/environment_options.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/environment.h"
#include "flywheel/rollout/episode_driver.h"
#include "flywheel/rollout/turn_markers.h"

namespace flywheel::model {
class Tokenizer;
}  // namespace flywheel::model

namespace flywheel::rollout {

// Defaults and meanings are environment:'s (core/options/environment_options.h).
struct EpisodeOptions {
  int64_t max_turns = core::EnvironmentOptions().max_turns;
  // Tokens of one model turn; 0: only the episode's budget (sampling.max_new_tokens) bounds it.
  int64_t turn_max_new_tokens = core::EnvironmentOptions().turn_max_new_tokens;
  int64_t max_observation_tokens = core::EnvironmentOptions().max_observation_tokens;
  double step_timeout_s = core::EnvironmentOptions().step_timeout_s;
  // Put around every text observation (turn_marker_ids()); none: appended as it is. Token-id
  // observations are always appended as they are: the environment chose every id.
  TurnMarkerIds markers;

  static EpisodeOptions from_config(const core::EnvironmentOptions& environment,
                                    TurnMarkerIds markers = {}) {
    return {environment.max_turns, environment.turn_max_new_tokens,
            environment.max_observation_tokens, environment.step_timeout_s, std::move(markers)};
  }
};

struct EpisodeRequest {
  std::string id;                            // unique among the runner's groups
  std::vector<int64_t> prompt_ids;           // as the engine takes them
  std::shared_ptr<const core::Json> record;  // the prompt record; never null
  SamplingParams sampling;                   // max_new_tokens bounds all tokens after the prompt
  int64_t n = 1;                             // episodes of this prompt (the group)
};

// A token stream of an agent episode that its agent rewrote (rollout.agent.on_rewrite:
// segment): trained as a further sequence of the group, with the episode's reward.
struct EpisodeSegment {
  std::vector<int64_t> prompt_ids;
  Sample sample;                     // from_model marks the model's tokens
  std::vector<int64_t> turn_ends;    // per reply: the index just past its last token
  std::vector<double> step_seconds;  // per reply taken up: the agent's time until it did
  int64_t tool_calls = 0;
};

// One episode.
struct Episode {
  // Everything after the prompt, one entry per token (engine.h): from_model is 1 on the model's
  // tokens and 0 on the environment's (log-prob 0, version -1). finish_reason is the episode's:
  // kStop when the environment ended it (done), kLength when it ran out of turns or tokens
  // first, kError when the environment failed (`error` says how), kAbort when aborted.
  Sample sample;
  std::vector<int64_t> turn_ends;    // per model turn: the index just past its last token
  std::vector<double> turn_rewards;  // per model turn: the environment's reward for it
  int64_t tool_calls = 0;
  std::vector<double> step_seconds;  // latency of each environment step answered in time

  // Agent episodes (agent/agent_runner.h): the reward the agent reported on its stdout, which
  // replaces the rewards' score, and the final assistant message, which the rewards score when
  // it reported none.
  std::optional<double> reported_reward;
  std::optional<std::string> final_message;
  std::vector<int64_t> prompt_ids;  // agents: this episode's own prompt; empty: the group's
  // Agents: the streams before the last rewrite, in order (the fields above are the last).
  std::vector<EpisodeSegment> earlier_segments;

  int64_t turns() const { return static_cast<int64_t>(turn_ends.size()); }
};

struct EpisodeGroup {
  std::string request_id;
  std::vector<int64_t> prompt_ids;
  std::vector<Episode> episodes;  // n, in sample-index order
};

struct EpisodeStats {
  int64_t episodes = 0;      // finished
  int64_t env_steps = 0;     // answered in time
  int64_t env_errors = 0;    // steps (or resets) that failed, threw or answered badly
  int64_t env_timeouts = 0;  // steps past step_timeout_s
};

class EpisodeRunner : public EpisodeDriver {
 public:
  // `engine` and `tokenizer` must outlive the runner; the runner is the engine's only user.
  // Without a tokenizer, model turns reach the environment without text and text observations
  // end their episodes with an error.
  EpisodeRunner(GenerationEngine* engine, std::shared_ptr<const Environment> environment,
                const model::Tokenizer* tokenizer, const EpisodeOptions& options);
  // Steps still running on their threads are left to finish on their own; they touch nothing
  // of the runner.
  ~EpisodeRunner() override;
  EpisodeRunner(const EpisodeRunner&) = delete;
  EpisodeRunner& operator=(const EpisodeRunner&) = delete;

  // Starts the group's episodes (the environment's reset(), then the prompt plus its first
  // observation into the engine). Errors, after which nothing is started: AlreadyExists for a
  // duplicate id; InvalidArgument for no record, n < 1, a reset that fails, passes its deadline
  // or answers badly (naming the episode), and what the engine's submit() refuses.
  absl::Status submit(EpisodeRequest request) override;
  // One engine step, then every environment step that ended (or passed its deadline) is
  // answered, and every turn that ended is handed to the environment.
  void step() override;
  bool idle() const override { return groups_.empty(); }
  // Groups whose episodes all ended, in completion order.
  std::vector<EpisodeGroup> take_finished() override;
  // Ends every episode (kAbort) and forgets their groups.
  void abort_all() override;
  int64_t running_episodes() const override;
  const EpisodeStats& stats() const { return stats_; }

 private:
  struct Mailbox;
  struct Running;
  struct Group;

  // Turns an observation into token ids: InvalidArgument naming what is wrong.
  absl::StatusOr<std::vector<int64_t>> observation_ids(const Observation& observation) const;
  void start_step(Group& group, int64_t sample, TurnEnd end);
  void answer(Group& group, int64_t sample, absl::StatusOr<EnvironmentStep> step, double seconds);
  void end_episode(Group& group, int64_t sample, FinishReason reason, const std::string& error);
  void collect_steps();
  void collect_finished();

  GenerationEngine* engine_;
  std::shared_ptr<const Environment> environment_;
  const model::Tokenizer* tokenizer_;
  EpisodeOptions options_;
  std::map<std::string, std::unique_ptr<Group>> groups_;
  std::vector<std::unique_ptr<Running>> running_;  // environment steps on their threads
  std::vector<EpisodeGroup> finished_;
  EpisodeStats stats_;
};

}  // namespace flywheel::rollout
