// Learner rank 0's batches: taken from the controller's core (the buffer the rollout workers
// push to), trainer.groups_per_step groups per step. While it waits it re-issues the leases of
// workers gone silent, prints a line every 30 s, and answers kWait every few seconds so that
// the other ranks never sit in one broadcast past its deadline. The batch of the last step
// closes the controller (nothing more is granted). Each batch's prompts are appended to the
// trained-prompts log, one JSON line per step: {"step": S, "prompts": [[epoch, prompt], ...]}.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/trainer/batch_source.h"

namespace flywheel::trainer {

struct ControllerBatchOptions {
  int64_t groups_per_step = 1;       // trainer.groups_per_step
  int64_t total_steps = 1;           // trainer.total_steps
  double no_progress_timeout_s = 0;  // trainer.no_progress_timeout_s; 0: wait for ever
  double wait_answer_s = 5;          // kWait after this long without a batch
  std::string prompts_log;           // "" = none
  std::string workers_logs;          // named in the no-progress message
};

class ControllerBatchSource final : public BatchSource {
 public:
  // `core` is not owned.
  ControllerBatchSource(const ControllerBatchOptions& options, buffer::ControllerCore* core)
      : options_(options), core_(core) {}

  absl::StatusOr<TrainingBatch> next(int64_t version, const StopRequested& stop) override;

  // After training: closes the controller, then waits (up to `timeout_s`) until every live
  // worker heard so and what they still push for the prompts they hold is taken (not trained
  // on), re-issuing the leases of workers gone silent. False when the time ran out first.
  bool settle(double timeout_s);

  // Keeps the lines of a trained-prompts log whose step is at most `step` (a resumed run
  // repeats the steps after its checkpoint; a torn last line is dropped).
  static absl::Status truncate_prompts_log(const std::string& path, int64_t step);

 private:
  using Clock = std::chrono::steady_clock;
  // What the workers have done to the buffer so far; the no-progress deadline runs while it
  // stays the same.
  int64_t progress() const;
  absl::Status log_prompts(int64_t step, const std::vector<buffer::PromptRef>& prompts) const;

  ControllerBatchOptions options_;
  buffer::ControllerCore* core_;
  int64_t waiting_for_ = -1;  // the version of the last call (the deadline restarts with a new one)
  int64_t last_progress_ = -1;
  Clock::time_point last_progress_at_ = Clock::now();
  Clock::time_point last_note_ = Clock::now();
};

}  // namespace flywheel::trainer
