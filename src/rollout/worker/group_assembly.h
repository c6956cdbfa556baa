// The rollout worker's groups, from generation to the controller: what rewards score, and the
// trajectory group pushed once they have. Single-turn groups and multi-turn episodes alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/buffer/trajectory.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rewards/scoring_pool.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/episode_runner.h"
#include "flywheel/rollout/worker/prompt_encoder.h"
#include "flywheel/v1/controller.pb.h"

namespace flywheel::rollout {

struct EpisodeSummary;

// What rewards score for each sample of `result`: the prompt's record and text, and the
// completion decoded without a final stop token (an episode's: the whole conversation after
// the prompt; an agent's: its final assistant message, episodes[i].final_message). *failed is
// set when a sample failed to generate or to decode: its group is not pushed.
std::vector<rewards::OwnedSample> samples_to_score(
    const GroupResult& result, const EncodedPrompt& prompt, const v1::PromptLease& lease,
    const model::Tokenizer& tokenizer, const std::vector<int64_t>& stop_token_ids,
    const std::vector<EpisodeSummary>& episodes, bool* failed);

// What a trajectory carries of its episode (trajectory.proto's episode fields).
struct EpisodeSummary {
  std::vector<int32_t> turn_ends;
  std::vector<double> turn_rewards;
  int32_t tool_calls = 0;
  std::vector<float> step_seconds;
  // Agent episodes: each has its own prompt (what the agent's first request rendered), may
  // report its reward (which replaces the rewards' score) and has a final message to score.
  std::vector<int64_t> prompt_ids;
  std::optional<double> reported_reward;
  std::optional<std::string> final_message;
  // Agents: the episode's streams before its last rewrite, each a trajectory of its own.
  std::vector<EpisodeSegment> earlier_segments;
};

// The routing a mixture-of-experts model records (Sample::routes): moe_layers x k expert ids per
// token, of num_experts experts. All 0 for dense models.
struct RouteShape {
  int32_t layers = 0;
  int32_t k = 0;
  int64_t experts = 0;
};

// The group the controller receives: the first `group_size` samples (a further scored one is
// the greedy baseline), each with its score plus, for episodes[i] (empty for single-turn
// groups), its environment rewards, and the episode's turns, tool calls and step latencies. An
// episode's environment tokens have loss mask 0 and the version of the model token before
// them, so staleness is that of the oldest model token. An agent episode's earlier segments
// come before its last one, as trajectories of the same sample index with the episode's reward.
// A sample's routes (`routes`: the model's) go with its trajectory when they cover exactly its
// prompt + response tokens (1 byte per id below 255 experts, else 2).
buffer::TrajectoryGroup trajectory_group(const std::string& worker_id, const v1::PromptLease& lease,
                                         const GroupResult& result,
                                         const std::vector<rewards::ScoredSample>& scored,
                                         const std::vector<EpisodeSummary>& episodes,
                                         size_t group_size, const RouteShape& routes = {});

// An episode runner's group in the engine's form; *episodes gets each episode's summary.
GroupResult as_group_result(EpisodeGroup group, std::vector<EpisodeSummary>* episodes);

// Tokens the model sampled in `sample` (an episode's environment tokens left out).
int64_t model_tokens(const Sample& sample);

}  // namespace flywheel::rollout
