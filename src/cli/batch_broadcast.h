// Trajectory groups from learner rank 0 (which takes them from the controller) to every learner
// rank, as flywheel.v1.TrajectoryGroup bytes (wire_codec) in one broadcast.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/buffer/trajectory.h"
#include "flywheel/comm/communicator.h"

namespace flywheel::cli {

// Rank 0's `groups` (and `tag`, a short word saying what the batch means) on every rank.
// Collective.
struct BroadcastBatch {
  std::string tag;
  std::vector<buffer::TrajectoryGroup> groups;
};
absl::StatusOr<BroadcastBatch> broadcast_batch(comm::Communicator& comm,
                                               const BroadcastBatch& batch);

}  // namespace flywheel::cli
