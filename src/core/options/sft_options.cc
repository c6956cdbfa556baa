#include "flywheel/core/options/sft_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, SftOptions& o) {
  b.field("response_key", &o.response_key,
          FieldInfo("Key of the target text in {\"prompt\", \"response\"} records (chat records "
                    "train on their last assistant message)."));
  b.field("batch_size", &o.batch_size,
          FieldInfo("Records per optimizer step, over all learner ranks.").min(1));
  b.field("eval_every", &o.eval_every,
          FieldInfo("Steps between evaluations on data.eval_path; 0 = only at the end.").min(0));
  b.field("eval_max_new_tokens", &o.eval_max_new_tokens,
          FieldInfo("Tokens of each greedy completion scored for exact-match accuracy.").min(1));
  b.field(
      "stop_at_accuracy", &o.stop_at_accuracy,
      FieldInfo("Stop once held-out exact-match accuracy reaches this; 0 = off.").min(0).max(1));
  b.field("eval_every_near_stop", &o.eval_every_near_stop,
          FieldInfo("Steps between evaluations while the last held-out accuracy is at least "
                    "half of stop_at_accuracy, so that a fast climb stops close to it; 0 = "
                    "eval_every.")
              .min(0));
}

}  // namespace flywheel::core
