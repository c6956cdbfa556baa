// Environments for multi-turn (agentic) episodes. An episode is one token-id stream: the prompt,
// then turns of the model (its tokens exactly as sampled) and of the environment (its
// observation tokenized once, on its own, inside the chat template's turn markers), never
// re-tokenized as a whole.
//
//   absl::StatusOr<EpisodeStart> start = env.reset(record);   // state + first observation
//   ... the model's turn ends at a stop (env.turn_stop_strings(), end of turn) ...
//   absl::StatusOr<EnvironmentStep> step = env.step(start->state.get(), turn);
//   ... append step->observation unless step->done ...
//
// Built-ins are registered by register_environment_builtins(); plugins add theirs:
//
//   registry.get<flywheel::rollout::Environment, const flywheel::rollout::EnvironmentSpec&>()
//       .add("my_env", &MyEnvironment::create);
//
// and configs select one by name (`environment.name`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/json.h"
#include "flywheel/core/options/environment_options.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::rollout {

// What the environment tells the model: text, which flywheel tokenizes once (wrapped in the chat
// template's turn markers), or token ids used as they are. At most one of the two is set; both
// empty is nothing to append.
struct Observation {
  std::string text;
  std::vector<int64_t> token_ids;

  bool empty() const { return text.empty() && token_ids.empty(); }
  static Observation of_text(std::string text) { return {std::move(text), {}}; }
};

// One turn of the model, as the episode runner hands it over.
struct ModelTurn {
  int64_t index = 0;               // 0 for the first turn
  std::vector<int64_t> token_ids;  // exactly as sampled, the stop token included
  std::string text;                // token_ids decoded
  bool truncated = false;          // ended at the turn's token budget, not at a stop
};

// The environment's answer to a turn.
struct EnvironmentStep {
  Observation observation;  // appended to the stream unless `done`
  double reward = 0;        // this turn's reward, credited at the turn's last model token
  bool done = false;        // the episode ends after this turn
  bool tool_call = false;   // the turn called a tool (counted: episode/tool_calls)
  std::map<std::string, double> info;  // numbers to log as metrics (env/<name>/<key>)
};

// Per-episode state an environment keeps between reset() and its steps; owned by the runner.
class EpisodeState {
 public:
  virtual ~EpisodeState() = default;
};

struct EpisodeStart {
  std::unique_ptr<EpisodeState> state;  // may be null: a stateless environment
  Observation observation;              // appended after the prompt before turn 0; may be empty
};

// What a factory gets.
struct EnvironmentSpec {
  std::string name;
  std::map<std::string, std::string> params;  // `environment.params`, strict
  std::string config_dir;                     // relative paths in params are taken from here
};

class Environment {
 public:
  static constexpr char kRegistryKind[] = "environment";
  virtual ~Environment() = default;

  // Starts an episode for the prompt record (a JSON object with its metadata). Errors name the
  // record's problem (a missing key, say); that episode then ends with finish_reason error.
  // Thread-safe: episodes of many groups run concurrently, each with its own state.
  virtual absl::StatusOr<EpisodeStart> reset(const core::Json& record) const = 0;
  // Answers one model turn. `state` is what reset() returned for this episode. Thread-safe as
  // reset(); one episode's steps are never concurrent.
  virtual absl::StatusOr<EnvironmentStep> step(EpisodeState* state,
                                               const ModelTurn& turn) const = 0;
  // Strings that end a model turn besides the chat template's end of turn (e.g. "</calc>"); the
  // stop string stays in the turn's tokens.
  virtual std::vector<std::string> turn_stop_strings() const { return {}; }
};

using EnvironmentFactory = absl::StatusOr<std::unique_ptr<Environment>>(const EnvironmentSpec&);

// Registers `calculator` and `guess_number`.
absl::Status register_environment_builtins(core::PluginRegistry& registry);

// The environment `environment.name` names, with its params (relative paths from
// `config_dir`); null when the name is empty (single-turn). Errors name the unknown name or the
// bad param.
absl::StatusOr<std::shared_ptr<const Environment>> make_environment(
    const core::EnvironmentOptions& options, core::PluginRegistry& registry,
    const std::string& config_dir);

}  // namespace flywheel::rollout
