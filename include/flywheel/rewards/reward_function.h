// Reward functions (DESIGN.md §5): score one completion of one prompt. Built-ins are registered
// by register_rewards_builtins(); plugins add theirs to the same registry:
//
//   registry.get<flywheel::rewards::RewardFunction, const flywheel::rewards::RewardSpec&>()
//       .add("my_reward", &MyReward::create);
//
// and configs select them by name under `rewards.functions`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "flywheel/core/json.h"

namespace flywheel::rewards {

// One completion to score. Views: the caller keeps what they point to alive during the call.
struct RewardInput {
  // The prompt record with its metadata ("answer", "tests", ...): a JSON object. Never null.
  const core::Json* record = nullptr;
  // Names the record in errors, e.g. "line 12" or the prompt id.
  absl::string_view record_name;
  absl::string_view prompt;      // the prompt text as the model saw it ("" when unknown)
  absl::string_view completion;  // the decoded completion (may hold any bytes)
  absl::Span<const int32_t> completion_ids;  // its token ids
  bool truncated = false;                    // stopped by max_new_tokens, not by a stop rule
};

// A score plus named components (each reported as a metric `reward/<function>/<component>`).
struct RewardOutput {
  double score = 0;
  std::map<std::string, double> components;
  // Process rewards (optional): step_rewards[k], a part of `score`, is paid at the token just
  // before completion_ids index step_ends[k] (ends increasing, within the completion), where
  // token-level estimators (gae, reinforce_pp) credit it; the rest of the score is paid at the
  // last token. Empty for an outcome score.
  std::vector<int32_t> step_ends;
  std::vector<double> step_rewards;
};

// What a factory gets: the function's name, its options and facts from the rest of the config.
struct RewardSpec {
  std::string name;
  std::map<std::string, std::string> params;  // `rewards.functions[i].params`, strict
  int64_t max_new_tokens = 0;                 // rollout.max_new_tokens (0 when unknown)
  // rewards.timeout_s: a call past it scores the fallback (0 when unknown). A function that can
  // take long (code_exec) stops in time to return its own score.
  double call_timeout_s = 0;
  std::string config_dir;  // relative paths in params are taken from here
};

class RewardFunction {
 public:
  static constexpr char kRegistryKind[] = "reward";
  virtual ~RewardFunction() = default;

  // Scores one completion. Thread-safe: called concurrently from the scoring pool. An error
  // (say a record without the metadata the function needs, naming the record and the key) makes
  // the pool give this function's fallback score and count it; it is never a crash.
  virtual absl::StatusOr<RewardOutput> score(const RewardInput& input) const = 0;

  // Scores several completions in one call. Functions that gain from batching (a reward model)
  // override it and return true from batched(); the default scores them one by one.
  virtual std::vector<absl::StatusOr<RewardOutput>> score_batch(
      const std::vector<RewardInput>& inputs) const;
  virtual bool batched() const { return false; }
  // A judge's score is a verdict in [0, 1] with 0.5 the boundary (llm_judge): the composite
  // reports how often it agrees with each other function of the run that is not a judge.
  virtual bool judge() const { return false; }
};

using RewardFactory = absl::StatusOr<std::unique_ptr<RewardFunction>>(const RewardSpec&);

// "line 3: math needs the key 'answer' in the record" style error for missing metadata.
absl::Status missing_key_error(const RewardInput& input, absl::string_view function,
                               absl::string_view key);

}  // namespace flywheel::rewards
