#include "flywheel/eval/data_loop.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/learner_job.h"

namespace flywheel::eval {

absl::StatusOr<std::string> run_data_loop(const DataLoopOptions& options,
                                          const DataLoopHooks& hooks,
                                          const std::function<bool()>& stop,
                                          comm::Communicator& world) {
  std::string stopped_by;
  int64_t last_eval_step = hooks.steps();
  while (hooks.steps() < options.total_steps) {
    FLYWHEEL_ASSIGN_OR_RETURN(const int64_t step, hooks.step());
    if (options.eval_every > 0 && step % options.eval_every == 0) {
      FLYWHEEL_RETURN_IF_ERROR(hooks.evaluate(step));
      last_eval_step = step;
    }
    if (options.checkpoint_every > 0 && step % options.checkpoint_every == 0) {
      FLYWHEEL_RETURN_IF_ERROR(hooks.save(step));
    }
    if (trainer::on_any_rank(stop(), world)) {
      stopped_by = "a signal";
      break;
    }
  }
  const int64_t steps = hooks.steps();
  if (last_eval_step != steps) FLYWHEEL_RETURN_IF_ERROR(hooks.evaluate(steps));
  FLYWHEEL_RETURN_IF_ERROR(hooks.save(steps));
  return stopped_by;
}

}  // namespace flywheel::eval
