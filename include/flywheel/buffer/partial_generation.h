// What a rollout worker generated for a leased prompt before it had to stop (preemption,
// rollout.finish_on_stop_s): per sample of the group, the tokens so far with their behaviour
// log-probs and policy versions. The worker hands it back with the lease; the controller keeps
// it with the prompt it re-issues, and the next worker continues these samples (prefill of the
// prompt and the tokens so far, then decode) instead of generating them again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/buffer/trajectory.h"

namespace flywheel::buffer {

struct PartialSample {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;  // behaviour log-prob of each token
  std::vector<int32_t> versions;
  bool finished = false;      // the sample ended; nothing is left to generate
  std::string finish_reason;  // stop | length, when finished
};

// One entry per sample of the group, in sample-index order.
using PartialGeneration = std::vector<PartialSample>;

// Smallest token version; INT64_MAX when no sample has a token.
int64_t min_version(const PartialGeneration& partial);
int64_t token_count(const PartialGeneration& partial);
size_t byte_size(const PartialGeneration& partial);

// InvalidArgument naming the field ("partial[2].versions[4]: ..."): a sample count other than
// limits.group_size, lengths of token_ids / logprobs / versions that differ, ids outside the
// vocabulary, log-probs that are not finite or positive, versions outside [0,
// current_version], more than limits.max_tokens tokens, or a finish_reason other than stop /
// length on a finished sample (and any on an unfinished one).
absl::Status validate_partial(const PartialGeneration& partial, const ValidationLimits& limits,
                              int64_t current_version);

}  // namespace flywheel::buffer
