// rollout_bench's multi-turn line: episodes through the EpisodeRunner against the same model
// tokens generated single-turn, in the same run.
#pragma once

#include <memory>

#include "flywheel/model/decoder.h"

namespace flywheel::bench {

// 32 episodes at once of 4 greedy turns of 16 model tokens, each answered by an environment
// with 8 tokens (appended and computed once, never re-tokenized), against 32 single-turn
// sequences of the same 64 model tokens. Prints both model-token rates (best of `repeats`,
// alternated) and their ratio.
void report_multi_turn(std::shared_ptr<model::DecoderModel> model, int repeats);

}  // namespace flywheel::bench
