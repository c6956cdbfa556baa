// `trainer:` — learner optimisation: steps, batches, optimizer, schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/field_binder.h"
#include "flywheel/core/options/model_options.h"  // Dtype

namespace flywheel::core {

// trainer.lr_schedule: the shape after warmup (trainer/lr_schedule.h).
enum class LrScheduleKind { kConstant, kLinear, kCosine };
absl::Span<const ChoiceName<LrScheduleKind>> choice_names(LrScheduleKind);

// trainer.lora: LoRA adapters on the policy (model/lora.h); rank 0 trains every parameter.
struct LoraTrainingOptions {
  int64_t rank = 0;
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                      "gate_proj", "up_proj", "down_proj"};
  bool merge_in_engine = true;  // rollout engines merge W + s B A per version (else unmerged)
};

void bind_options(FieldBinder& b, LoraTrainingOptions& o);

struct TrainerOptions {
  int64_t total_steps = 100;          // optimizer steps (the policy version counts them)
  int64_t groups_per_step = 8;        // prompt groups consumed per optimizer step
  int64_t ppo_epochs = 1;             // passes over each step's batch
  int64_t mini_batches = 1;           // optimizer updates per epoch
  int64_t micro_batch_tokens = 8192;  // tokens per forward/backward chunk
  bool shared_prefix = true;          // samples of one prompt share its forward (micro_batch.h)
  bool exact_logprobs = true;         // proximal log-probs in the engine's CPU kernels
  double lr = 1e-6;
  LrScheduleKind lr_schedule = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;  // final lr / lr for linear and cosine
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;  // global gradient-norm clip; 0 = off
  double critic_lr = 1e-5;
  int64_t seed = 1;
  Dtype param_dtype = Dtype::kFloat32;   // compute dtype (float16: GPU only)
  Dtype reduce_dtype = Dtype::kFloat32;  // gradient reduction dtype
  bool reshard_after_forward = true;     // free gathered units after forward (recompute)
  int64_t max_consecutive_skips = 3;     // non-finite updates in a row before the run stops
  double no_progress_timeout_s = 1800;   // no group arriving this long is an error; 0 = off
  LoraTrainingOptions lora;

  absl::Status validate() const;
};

void bind_options(FieldBinder& b, TrainerOptions& o);

}  // namespace flywheel::core
