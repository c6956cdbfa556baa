#include "flywheel/core/options/trainer_options.h"

namespace flywheel::core {

absl::Span<const ChoiceName<LrScheduleKind>> choice_names(LrScheduleKind) {
  static constexpr ChoiceName<LrScheduleKind> kNames[] = {{LrScheduleKind::kConstant, "constant"},
                                                          {LrScheduleKind::kLinear, "linear"},
                                                          {LrScheduleKind::kCosine, "cosine"}};
  return kNames;
}

void bind_options(FieldBinder& b, LoraTrainingOptions& o) {
  b.field("rank", &o.rank,
          FieldInfo("LoRA rank r of the policy's adapters; 0 = off (every parameter trains). On: "
                    "the base weights are frozen (model.path must hold them), only the adapters "
                    "are trained, sharded, checkpointed and published to the rollout workers.")
              .min(0));
  b.field("alpha", &o.alpha,
          FieldInfo("LoRA alpha: a projection W becomes W + (alpha / rank) B A.").greater_than(0));
  b.field("dropout", &o.dropout,
          FieldInfo("Dropout probability on the adapters' inputs in training (the engines never "
                    "drop).")
              .min(0)
              .max(0.99));
  b.field("targets", &o.targets,
          FieldInfo("Projections that get adapters: any of q_proj, k_proj, v_proj, o_proj, "
                    "gate_proj, up_proj, down_proj (mixture-of-experts models: attention only)."));
  b.field("merge_in_engine", &o.merge_in_engine,
          FieldInfo("Rollout engines run the merged W + (alpha / rank) B A, recomputed when a new "
                    "version arrives (faster decode: see docs/models.md); false adds the "
                    "adapters' two small projections to every forward."));
}

void bind_options(FieldBinder& b, TrainerOptions& o) {
  b.field("total_steps", &o.total_steps,
          FieldInfo("Optimizer steps to run; the policy version counts them.").min(1));
  b.field("groups_per_step", &o.groups_per_step,
          FieldInfo("Prompt groups consumed per optimizer step.").min(1));
  b.field("ppo_epochs", &o.ppo_epochs, FieldInfo("Passes over each step's batch.").min(1));
  b.field("mini_batches", &o.mini_batches,
          FieldInfo("Optimizer updates per epoch (the batch is split evenly).").min(1));
  b.field("micro_batch_tokens", &o.micro_batch_tokens,
          FieldInfo("Token budget of one forward/backward chunk (gradient accumulation).").min(1));
  b.field("shared_prefix", &o.shared_prefix,
          FieldInfo("Samples of one prompt in a micro-batch share the prompt's forward and "
                    "backward: its tokens are computed once and every sample's response reads "
                    "their keys and values (equal results to rounding; off: each sample "
                    "recomputes its prompt). Mixture-of-experts trajectories (their routes are per "
                    "sample) and models trained with the load-balancing loss do not share."));
  b.field("exact_logprobs", &o.exact_logprobs,
          FieldInfo("On the CPU (float32 or bfloat16, with AVX2 or AVX-512), the policy's proximal "
                    "log-prob pass runs the rollout engine's kernels, so that tokens computed at "
                    "the learner's current version (with every earlier token of their response) "
                    "get proximal log-probs equal to their behaviour log-probs bit for bit "
                    "(rollout.logprob_mode temperature_scaled): their TIS / IcePop weights are "
                    "exactly 1. With one update per step "
                    "(ppo_epochs 1, mini_batches 1) this adds that no-grad pass; false: the "
                    "training forward's log-probs serve, as before (within ~1e-5)."));
  b.field("lr", &o.lr, FieldInfo("Peak learning rate of the policy.").greater_than(0));
  b.choice("lr_schedule", &o.lr_schedule, FieldInfo("Schedule after warmup."));
  b.field("warmup_steps", &o.warmup_steps, FieldInfo("Linear warmup steps.").min(0));
  b.field("min_lr_ratio", &o.min_lr_ratio,
          FieldInfo("Final lr as a fraction of lr (linear, cosine).").min(0).max(1));
  b.field("weight_decay", &o.weight_decay, FieldInfo("AdamW weight decay.").min(0));
  b.field("adam_beta1", &o.adam_beta1, FieldInfo("AdamW beta1.").min(0).max(1));
  b.field("adam_beta2", &o.adam_beta2, FieldInfo("AdamW beta2.").min(0).max(1));
  b.field("adam_eps", &o.adam_eps, FieldInfo("AdamW epsilon.").greater_than(0));
  b.field("grad_clip", &o.grad_clip, FieldInfo("Global gradient-norm clip; 0 = off.").min(0));
  b.field("critic_lr", &o.critic_lr, FieldInfo("Learning rate of the critic.").greater_than(0));
  b.field("seed", &o.seed, FieldInfo("Seed of initialisation and learner randomness.").min(0));
  b.choice("param_dtype", &o.param_dtype,
           FieldInfo("Compute dtype of the learners' gathered parameters and activations; master "
                     "weights and optimizer state stay float32."),
           {Dtype::kFloat32, Dtype::kBFloat16, Dtype::kFloat16});
  b.choice("reduce_dtype", &o.reduce_dtype, FieldInfo("Dtype gradients are reduce-scattered in."),
           {Dtype::kFloat32, Dtype::kBFloat16, Dtype::kFloat16});
  b.field("reshard_after_forward", &o.reshard_after_forward,
          FieldInfo("Free each unit's gathered parameters after its forward and recompute it in "
                    "backward (activation checkpointing); false keeps them: faster, more memory."));
  b.field("max_consecutive_skips", &o.max_consecutive_skips,
          FieldInfo("Updates skipped in a row for a non-finite loss or gradient norm before the "
                    "run stops with an error.")
              .min(1));
  b.field("no_progress_timeout_s", &o.no_progress_timeout_s,
          FieldInfo("The learners stop with an error when, waiting for a batch, they see no "
                    "group pushed, filtered or dropped for this many seconds (rollout workers "
                    "that all died or cannot generate); 0 = wait forever.")
              .min(0));
  b.section("lora", &o.lora,
            "LoRA: train low-rank adapters of the policy instead of every weight.");
}

absl::Status TrainerOptions::validate() const {
  if (warmup_steps > total_steps) {
    return absl::InvalidArgumentError("warmup_steps: must be <= total_steps");
  }
  if (groups_per_step % mini_batches != 0) {
    return absl::InvalidArgumentError(
        "mini_batches: must divide groups_per_step so mini-batches hold whole groups");
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
