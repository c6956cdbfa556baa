// Learner checkpoints: a directory per step, <dir>/step_<N>/, holding
//   rank-<r>-of-<W>.safetensors  each rank's shards: every model's trainable units (policy,
//                                reference, critic; a LoRA model's adapters only, its frozen
//                                base is reloaded from its directory) and the optimizers'
//                                moments, float32;
//   trainer_state.json           version, optimizer steps, KL coefficient, skip count, world
//                                size, the units and the model config (and for LoRA models
//                                the adapters' shape and base directory);
//   any extra files the caller adds (the resolved config, the controller's snapshot, ...);
//   COMPLETE                     written last.
// Everything is written into step_<N>.tmp, fsynced, then renamed; a directory without COMPLETE
// is never resumed from (latest_checkpoint() skips it with a warning naming it), so a run killed
// while writing resumes from the previous complete checkpoint. The directory must be on a
// filesystem every rank sees (one machine, or a shared filesystem).
//
// Learners have no random state of their own: with the same batches a resumed run is
// bit-identical to one that did not stop (CPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/learner.h"

namespace flywheel::trainer {

// What a checkpoint holds of a training job: its sharded models and optimizers by name, and
// scalars (version, KL coefficient, data position, ...).
struct TrainingState {
  std::vector<std::pair<std::string, ShardedDecoder*>> models;
  std::vector<std::pair<std::string, ShardedAdamW*>> optimizers;
  std::map<std::string, double> scalars;
};

// The state of a trainer of one model (SFT, preference): the model and optimizer as `name`
// ("policy"; a reward model's value-head decoder "critic", the name export gives that layout),
// and the update counters.
TrainingState policy_training_state(ShardedDecoder& model, ShardedAdamW& optimizer,
                                    const UpdateCounters& counters,
                                    const std::string& name = "policy");

struct CheckpointSaveOptions {
  int64_t keep_last = 3;  // older complete checkpoints are deleted after a save; 0 = keep all
  std::map<std::string, std::string> extra_files;  // name -> content, written by rank 0
  // Called on every rank once its shard file is written, before the checkpoint is committed
  // (tests kill the process here).
  std::function<void()> before_commit;
};

// Saves `state` as step `step` under `dir`. Collective over `comm` (the models' communicator);
// every rank returns the same status (Unavailable naming the file that could not be written).
absl::Status save_checkpoint(const TrainingState& state, comm::Communicator& comm,
                             const std::string& dir, int64_t step,
                             const CheckpointSaveOptions& options = {});
absl::Status save_checkpoint(Learner& learner, const std::string& dir, int64_t step,
                             const CheckpointSaveOptions& options = {});

// The newest complete step directory under `dir`; NotFound when there is none.
absl::StatusOr<std::string> latest_checkpoint(const std::string& dir);

// Restores the models and optimizers of `state` from a step directory and returns the saved
// scalars. Collective. Errors name the file and what differs: no COMPLETE marker, another world
// size, missing or truncated shard files, tensors of other shapes or dtypes, missing scalars.
absl::StatusOr<std::map<std::string, double>> load_checkpoint(const TrainingState& state,
                                                              comm::Communicator& comm,
                                                              const std::string& step_dir);
// The same for a learner: parameters, optimizer state, version, KL coefficient, skip count.
absl::Status load_checkpoint(Learner& learner, const std::string& step_dir);

// Writes model `model` ("policy", "reference", "critic", a process reward model's "prm") of a
// step directory as a Hugging Face directory in `dtype` (a critic as a sequence classifier, a
// "prm" as a token classifier with a zero score.bias), reading every rank's shard file in this one
// process (no MPI needed), and copies the tokenizer and generation files the checkpoint holds.
// Errors name the file: not a checkpoint, incomplete, a missing rank file or tensor, a model it
// does not hold.
// A model trained with trainer.lora exports merged (W + (alpha / rank) B A, from the base
// weights its checkpoint names); its base directory must still be there.
absl::Status export_checkpoint(const std::string& step_dir, const std::string& model,
                               const std::string& out_dir, at::ScalarType dtype,
                               const model::SaveOptions& save = {});

// Writes the LoRA adapters of model `model` of a step directory as a Hugging Face PEFT adapter
// (adapter_config.json naming the base directory, adapter_model.safetensors; peft_adapter.h),
// with the checkpoint's tokenizer files. FailedPrecondition for a model trained without LoRA.
absl::Status export_adapter(const std::string& step_dir, const std::string& model,
                            const std::string& out_dir);

// The end of a run: model `model` of `step_dir` as `<run_dir>/hf` in `dtype` (export_checkpoint)
// and, for a model trained with LoRA, its PEFT adapter as `<run_dir>/adapter` too. Returns what
// was written, for the run's summary line.
absl::StatusOr<std::string> export_run(const std::string& step_dir, const std::string& model,
                                       const std::string& run_dir, at::ScalarType dtype);

// An extra file of a step directory (e.g. the controller snapshot); NotFound when absent.
absl::StatusOr<std::string> read_checkpoint_file(const std::string& step_dir,
                                                 const std::string& name);

}  // namespace flywheel::trainer
