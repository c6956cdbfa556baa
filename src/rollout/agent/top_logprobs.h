// The most likely tokens at each position of a completion, for requests that ask for
// top_logprobs: one forward pass of the engine's model over the prompt and the completion
// (under the weights it then holds), log_softmax(logits / temperature) (temperature 0 counts
// as 1, as the behaviour log-probs do).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "flywheel/model/decoder.h"

namespace flywheel::rollout::agent {

// Per completion token: the k most likely (id, log-prob) pairs, most likely first.
std::vector<std::vector<std::pair<int64_t, float>>> top_logprobs(
    const model::DecoderModel& model, const std::vector<int64_t>& prompt_ids,
    const std::vector<int64_t>& completion_ids, int64_t k, double temperature);

}  // namespace flywheel::rollout::agent
