// RolloutWorker's private pieces, shared by its source files: the work it holds (a lease waiting
// for the engine, a group being generated) and the request ids it gives the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flywheel/rollout/worker/rollout_worker.h"

namespace flywheel::rollout {

inline constexpr char kBaselineSuffix[] = "/greedy";  // request id of a lease's greedy baseline
inline constexpr char kResumedSample = '#';           // "<lease>#<sample>": a sample continued

struct RolloutWorker::Pending {
  v1::PromptLease lease;
  EncodedPrompt prompt;
  int64_t grant_version = 0;
};

struct RolloutWorker::Active {
  v1::PromptLease lease;
  EncodedPrompt prompt;
  std::unique_ptr<GroupResult> group, baseline;  // finished requests
  // A group continued from a stopped worker's samples: every sample (what it was given, then
  // what this worker adds), the requests still generating, and the tokens it was given.
  std::vector<Sample> resumed;
  int64_t waiting = 0;
  int64_t resumed_tokens = 0;
};

}  // namespace flywheel::rollout
