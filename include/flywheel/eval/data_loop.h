// The step loop of the jobs that train on a dataset (`flywheel dpo`, `flywheel rm`,
// `flywheel rm --process`): optimizer steps until trainer.total_steps or a stop request on any
// rank, held-out evaluation every `eval_every` steps and once more at the end, a checkpoint
// every `checkpoint_every` steps and at the end. Collective: every rank runs it in step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"

namespace flywheel::eval {

struct DataLoopOptions {
  int64_t total_steps = 0;
  int64_t eval_every = 0;        // 0 = only at the end
  int64_t checkpoint_every = 0;  // 0 = only at the end
};

struct DataLoopHooks {
  std::function<absl::StatusOr<int64_t>()> step;       // one optimizer step: the steps done
  std::function<int64_t()> steps;                      // the steps done so far
  std::function<absl::Status(int64_t step)> evaluate;  // held-out figures at `step`
  std::function<absl::Status(int64_t step)> save;      // a checkpoint at `step`
};

// Runs the loop after the caller evaluated at the starting step; returns what stopped it early
// ("a signal"), or "" when total_steps was reached.
absl::StatusOr<std::string> run_data_loop(const DataLoopOptions& options,
                                          const DataLoopHooks& hooks,
                                          const std::function<bool()>& stop,
                                          comm::Communicator& world);

}  // namespace flywheel::eval
