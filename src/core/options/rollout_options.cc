#include "flywheel/core/options/rollout_options.h"

#include "absl/strings/str_cat.h"

namespace flywheel::core {

absl::Span<const ChoiceName<WeightUpdate>> choice_names(WeightUpdate) {
  static constexpr ChoiceName<WeightUpdate> kNames[] = {{WeightUpdate::kInFlight, "in_flight"},
                                                        {WeightUpdate::kDrain, "drain"}};
  return kNames;
}

absl::Span<const ChoiceName<LogprobMode>> choice_names(LogprobMode) {
  static constexpr ChoiceName<LogprobMode> kNames[] = {
      {LogprobMode::kTemperatureScaled, "temperature_scaled"},
      {LogprobMode::kProcessed, "processed"}};
  return kNames;
}

void bind_options(FieldBinder& b, RolloutOptions& o) {
  b.field("num_workers", &o.num_workers,
          FieldInfo("Rollout worker processes started by `flywheel train`.").min(0));
  b.field("group_size", &o.group_size,
          FieldInfo("Completions sampled per prompt (the GRPO group).").min(1));
  b.field("max_new_tokens", &o.max_new_tokens,
          FieldInfo("Maximum generated tokens per completion.").min(1));
  b.field("temperature", &o.temperature, FieldInfo("Sampling temperature; 0 = greedy.").min(0));
  b.field("top_k", &o.top_k, FieldInfo("Keep the k most likely tokens; 0 = off.").min(0));
  b.field("top_p", &o.top_p, FieldInfo("Nucleus sampling mass; 1 = off.").greater_than(0).max(1));
  b.field("min_p", &o.min_p,
          FieldInfo("Drop tokens below min_p x the top probability; 0 = off.").min(0).max(1));
  b.field("stop", &o.stop, FieldInfo("Stop strings; generation ends after any of them."));
  b.field("max_slots", &o.max_slots,
          FieldInfo("Concurrent sequences per engine (preallocated KV-cache slots).").min(1));
  b.field("seed", &o.seed, FieldInfo("Base sampling seed.").min(0));
  b.choice("weight_update", &o.weight_update,
           FieldInfo("in_flight: apply new weights between decode steps; drain: wait until "
                     "active sequences finish."));
  b.field("recompute_kv_on_update", &o.recompute_kv_on_update,
          FieldInfo("After a weight update, recompute the KV cache of in-flight sequences under "
                    "the new weights (costs one prefill of every active sequence)."));
  b.choice(
      "logprob_mode", &o.logprob_mode,
      FieldInfo("Distribution of the recorded behaviour log-probs: temperature_scaled "
                "(log_softmax(logits / temperature), before top-k/top-p/min-p: what the "
                "learner recomputes) or processed (the truncated distribution sampled from)."));
  b.field("max_prefill_tokens", &o.max_prefill_tokens,
          FieldInfo("Prompt tokens prefilled in one engine step (at least one prompt).").min(1));
  b.field("finish_on_stop_s", &o.finish_on_stop_s,
          FieldInfo("When a worker is stopped (SIGTERM, as a spot or preemptible node is, or "
                    "SIGINT): seconds it keeps generating so that groups near their end finish "
                    "and are pushed. Then it hands every group still generating back to the "
                    "controller with its samples so far (tokens, behaviour log-probs, "
                    "versions), and another worker continues them instead of generating them "
                    "again (single-turn groups; episodes and greedy baselines are generated "
                    "afresh). Keep it well inside the node's grace period.")
              .min(0));
  b.section("agent", &o.agent,
            "Black-box agents: each episode runs `command`, which talks to the worker's "
            "OpenAI-compatible endpoint (docs/agents.md).");
}

absl::Status RolloutOptions::validate() const {
  if (max_slots < group_size) {
    return absl::InvalidArgumentError(
        "max_slots: must be >= group_size so that one prompt's group fits in the engine");
  }
  absl::Status agent_status = agent.validate();
  if (!agent_status.ok())
    return absl::InvalidArgumentError(absl::StrCat("agent.", agent_status.message()));
  return absl::OkStatus();
}

}  // namespace flywheel::core
