#include "flywheel/core/options/rewards_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, RewardFunctionOptions& o) {
  b.field(
      "name", &o.name,
      FieldInfo(
          "Reward registry name: exact_match, math, format_regex, overlong_penalty, "
          "length_penalty, repetition_penalty, code_exec, reward_model, llm_judge or a plugin's."));
  b.field("label", &o.label,
          FieldInfo("Metric prefix of this function (reward/<label>/...); empty = its name. Needed "
                    "to use one function twice."));
  b.field("weight", &o.weight, FieldInfo("Weight of this reward in the sum."));
  b.field("params", &o.params,
          FieldInfo("The function's options (docs/rewards.md); an unknown option is an error."));
}

void bind_options(FieldBinder& b, RewardsOptions& o) {
  b.section_list("functions", &o.functions,
                 "Reward functions; the trajectory reward is their weighted sum.");
  b.field("timeout_s", &o.timeout_s,
          FieldInfo("Deadline of one scoring call (one sample; one group for a batched function "
                    "such as reward_model), in seconds; past it the function scores "
                    "fallback_score and the timeout is counted.")
              .greater_than(0));
  b.field("fallback_score", &o.fallback_score,
          FieldInfo("Score of a function that fails or times out on a sample (counted in "
                    "reward/errors, reward/timeouts)."));
  b.field("workers", &o.workers, FieldInfo("Threads of the scoring pool.").min(1).max(256));
  b.field("queue_size", &o.queue_size,
          FieldInfo("Scoring calls that may wait for a thread before submitters block.").min(1));
}

absl::Status RewardsOptions::validate() const {
  for (size_t i = 0; i < functions.size(); ++i) {
    if (functions[i].name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("functions[", i, "].name: must be set"));
    }
    if (!std::isfinite(functions[i].weight)) {
      return absl::InvalidArgumentError(absl::StrCat("functions[", i, "].weight: must be finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
