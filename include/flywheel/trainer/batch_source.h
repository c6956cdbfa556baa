// Where the RL loop's batches come from. Learner rank 0 takes them from the controller
// (ControllerBatchSource); every other rank gets rank 0's over the learners' communicator
// (BroadcastBatchSource); a test hands them out from memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/buffer/trajectory.h"
#include "flywheel/comm/communicator.h"

namespace flywheel::trainer {

// One answer of a source: groups to train on, or why there are none.
struct TrainingBatch {
  enum class Kind {
    kGroups,      // train on `groups`
    kWait,        // none yet: ask again (lets every rank leave its collective in time)
    kStop,        // a stop was requested
    kExhausted,   // every prompt of every epoch is done and nothing is buffered
    kNoProgress,  // nothing arrived for too long: an error, `why` says what was seen
  };
  Kind kind = Kind::kWait;
  std::vector<buffer::TrajectoryGroup> groups;
  std::string why;
};

// "groups", "wait", "stop", "exhausted", "no_progress".
const char* batch_kind_name(TrainingBatch::Kind kind);

// Asked between steps of the loop; true: stop after the step in progress.
using StopRequested = std::function<bool()>;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The batch to train on at policy version `version` (the steps taken), or why there is none.
  // `stop` is consulted by whichever side decides (for a broadcast, rank 0's source).
  virtual absl::StatusOr<TrainingBatch> next(int64_t version, const StopRequested& stop) = 0;
};

// Rank 0's `root` batches on every rank of `comm` (as flywheel.v1.TrajectoryGroup bytes,
// wire_codec, in one broadcast per answer). `root` is used on rank 0 only (null elsewhere).
// Every call is collective; DataLoss for bytes that do not decode.
class BroadcastBatchSource final : public BatchSource {
 public:
  BroadcastBatchSource(comm::Communicator* comm, BatchSource* root) : comm_(comm), root_(root) {}
  absl::StatusOr<TrainingBatch> next(int64_t version, const StopRequested& stop) override;

 private:
  comm::Communicator* comm_;
  BatchSource* root_;
};

// The broadcast itself: rank 0's `batch` on every rank. Collective.
absl::StatusOr<TrainingBatch> broadcast_batch(comm::Communicator& comm, const TrainingBatch& batch);

}  // namespace flywheel::trainer
