#include "flywheel/core/options/rm_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, RmOptions& o) {
  b.field("center_coefficient", &o.center_coefficient,
          FieldInfo("Weight of (r_chosen + r_rejected)^2 added to each pair's loss, keeping the "
                    "rewards centred on 0 (TRL's center_rewards_coefficient); 0 = off.")
              .min(0));
  b.field("batch_size", &o.batch_size,
          FieldInfo("Pairs per optimizer step, over all learner ranks.").min(1));
  b.field("eval_every", &o.eval_every,
          FieldInfo("Steps between evaluations of held-out pairwise accuracy on "
                    "data.eval_path; 0 = only at the end.")
              .min(0));
}

}  // namespace flywheel::core
