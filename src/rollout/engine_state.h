// GenerationEngine's private state, shared by its source files (engine.cc, engine_turns.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flywheel/rollout/engine.h"

namespace flywheel::rollout {

struct GenerationEngine::Group {
  GenerationRequest request;
  std::vector<Sample> samples;
  std::vector<std::unique_ptr<LogitsProcessor>> processors;
  int64_t unfinished = 0;
  bool admitted = false;
};

struct GenerationEngine::Sequence {
  Group* group = nullptr;
  int64_t index = 0;  // sample index in the group
  int64_t slot = 0;
  std::vector<int64_t> tokens;  // prompt + generated
  int64_t cached = 0;           // tokens[0, cached) are in the slot's KV cache
  bool waiting = false;         // multi-turn: a turn ended; not computed until continued
  int64_t turn_start = 0;       // multi-turn: sample().token_ids index of the turn's first token
  uint64_t seed = 0;  // sample_seed(request seed, index): its draws are sample_uniform(seed, i)
  // Mixture of experts: the routes of tokens[0, cached), moe_layers x num_experts_per_tok ids
  // each (Sample::routes).
  std::vector<uint16_t> routes;
  Sample& sample() { return group->samples[index]; }
};

}  // namespace flywheel::rollout
