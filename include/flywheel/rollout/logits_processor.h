// Logits processors: per-token transformations of the logits before sampling (repetition
// penalties, grammar masks, ...). A registry kind, so plugins can add their own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::rollout {

// One instance serves every sample of one request. apply() is called from the engine's thread
// only; it must depend on nothing but `tokens` (the sample's prompt and generated ids). It runs
// inside the engine step's c10::InferenceMode: tensors it makes are inference tensors, which it
// must not keep and write in place outside apply().
class LogitsProcessor {
 public:
  static constexpr char kRegistryKind[] = "logits_processor";
  virtual ~LogitsProcessor() = default;
  // Modifies `logits` (float32 [vocab], CPU, raw: before temperature) in place.
  virtual void apply(at::Tensor& logits, const std::vector<int64_t>& tokens) const = 0;
};

using LogitsProcessorParams = std::map<std::string, std::string>;

// Hugging Face's repetition penalty: every token already in `tokens` has its logit divided by
// `penalty` when positive and multiplied by it when negative. Params: penalty (> 0, default 1).
class RepetitionPenalty : public LogitsProcessor {
 public:
  static absl::StatusOr<std::unique_ptr<LogitsProcessor>> create(const LogitsProcessorParams& p);
  void apply(at::Tensor& logits, const std::vector<int64_t>& tokens) const override;

 private:
  explicit RepetitionPenalty(double penalty) : penalty_(penalty) {}
  double penalty_;
};

// The rollout component's built-ins: logits processor repetition_penalty and the environments
// of register_environment_builtins().
absl::Status register_rollout_builtins(core::PluginRegistry& registry);

}  // namespace flywheel::rollout
