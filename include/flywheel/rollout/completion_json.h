// A generated sample as `flywheel generate` writes it: text, token ids, per-token log-probs and
// versions, finish_reason; for an episode also each token's source ("model" / "environment")
// and turn, the environment's rewards per turn and the tool calls.
#pragma once

#include "flywheel/core/json.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/episode_runner.h"

namespace flywheel::model {
class Tokenizer;
}  // namespace flywheel::model

namespace flywheel::rollout {

// `tokenizer` may be null (no "text"); `episode` is null for a single-turn sample.
core::Json completion_json(const Sample& sample, const Episode* episode,
                           const model::Tokenizer* tokenizer);

}  // namespace flywheel::rollout
