#include "flywheel/core/options/rm_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, RmOptions& o) {
  b.field("center_coefficient", &o.center_coefficient,
          FieldInfo("Weight of (r_chosen + r_rejected)^2 added to each pair's loss, keeping the "
                    "rewards centred on 0 (TRL's center_rewards_coefficient); 0 = off.")
              .min(0));
  b.field("batch_size", &o.batch_size,
          FieldInfo("Pairs (with --process: completions) per optimizer step, over all learner "
                    "ranks.")
              .min(1));
  b.field("eval_every", &o.eval_every,
          FieldInfo("Steps between evaluations of held-out pairwise accuracy (with --process: "
                    "step accuracy) on data.eval_path; 0 = only at the end.")
              .min(0));
  b.field("steps_key", &o.steps_key,
          FieldInfo("--process: the record key of a completion's steps (a list of strings; "
                    "TRL's stepwise-supervision \"completions\")."));
  b.field("labels_key", &o.labels_key,
          FieldInfo("--process: the record key of the steps' labels (true / false, or 1 / 0, "
                    "one per step)."));
  b.field("separator", &o.separator,
          FieldInfo("--process: appended to every step before tokenizing it, the label read "
                    "at its last token; the process_reward_model reward's `separator` must be "
                    "the same. \"\" = none (per-token steps)."));
}

}  // namespace flywheel::core
