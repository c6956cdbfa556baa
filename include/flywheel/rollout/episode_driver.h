// What the rollout worker drives multi-turn episodes through: the EpisodeRunner (an
// environment, episode_runner.h) or the AgentRunner (black-box agents over the OpenAI
// endpoint, agent/agent_runner.h). One thread drives it, as it drives the engine it owns.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace flywheel::rollout {

struct EpisodeRequest;
struct EpisodeGroup;

class EpisodeDriver {
 public:
  virtual ~EpisodeDriver() = default;
  // Starts a group of request.n episodes; errors name what was refused, nothing is started.
  virtual absl::Status submit(EpisodeRequest request) = 0;
  // Advances every episode by one engine step (or waits briefly for work when there is none).
  virtual void step() = 0;
  virtual bool idle() const = 0;
  // Groups whose episodes all ended, in completion order.
  virtual std::vector<EpisodeGroup> take_finished() = 0;
  // Ends every episode (kAbort) and forgets their groups.
  virtual void abort_all() = 0;
  // Episodes started and not yet ended.
  virtual int64_t running_episodes() const = 0;
};

}  // namespace flywheel::rollout
