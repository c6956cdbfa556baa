#include "flywheel/rollout/logits_processor.h"

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rollout/environment.h"

namespace flywheel::rollout {

absl::StatusOr<std::unique_ptr<LogitsProcessor>> RepetitionPenalty::create(
    const LogitsProcessorParams& params) {
  double penalty = 1.0;
  for (const auto& [key, value] : params) {
    if (key != "penalty") {
      return absl::InvalidArgumentError(
          absl::StrCat("repetition_penalty: unknown parameter '", key, "'; known: penalty"));
    }
    if (!absl::SimpleAtod(value, &penalty) || !(penalty > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("repetition_penalty: penalty must be a number > 0, got '", value, "'"));
    }
  }
  return std::unique_ptr<LogitsProcessor>(new RepetitionPenalty(penalty));
}

void RepetitionPenalty::apply(at::Tensor& logits, const std::vector<int64_t>& tokens) const {
  if (penalty_ == 1.0 || tokens.empty()) return;
  at::Tensor ids = at::tensor(tokens, at::kLong).to(logits.device());
  at::Tensor values = logits.index_select(0, ids);
  values = at::where(values > 0, values / penalty_, values * penalty_);
  logits.index_put_({ids}, values);
}

absl::Status register_rollout_builtins(core::PluginRegistry& registry) {
  auto& processors = registry.get<LogitsProcessor, const LogitsProcessorParams&>();
  FLYWHEEL_RETURN_IF_ERROR(processors.add("repetition_penalty", &RepetitionPenalty::create));
  return register_environment_builtins(registry);
}

}  // namespace flywheel::rollout
