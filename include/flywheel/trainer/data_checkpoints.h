// Checkpoints of a job that walks a dataset (`flywheel sft`, `dpo`, `rm`): in checkpoint.dir (or
// <logging.run_dir>/checkpoints), checkpoint.keep_last of them, each with the tokenizer files
// (for export), the trainer's state and the data cursor; a save of the step saved last is
// skipped (the final save after a periodic one).
//
//   FLYWHEEL_ASSIGN_OR_RETURN(DataCheckpoints checkpoints, DataCheckpoints::create(c, dir));
//   auto scalars = checkpoints.resume(trainer->training_state(), world, n, &cursor);
//   checkpoints.save(trainer->training_state(), world, step, cursor, n);
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/sft_data.h"

namespace flywheel::trainer {

class DataCheckpoints {
 public:
  // The checkpoint options of `config`; the tokenizer and generation files of `tokenizer_dir`
  // travel with every checkpoint.
  static absl::StatusOr<DataCheckpoints> create(const core::Config& config,
                                                const std::string& tokenizer_dir);

  // Loads `state` from the step directory checkpoint.resume names, if any, and the cursor of a
  // run over `records` records into `*cursor`; returns the checkpoint's scalars (empty: nothing
  // to resume). FailedPrecondition when the checkpoint walked another number of records.
  // Collective.
  absl::StatusOr<std::map<std::string, double>> resume(const TrainingState& state,
                                                       comm::Communicator& world, int64_t records,
                                                       SftCursor* cursor);
  // Saves `state` with the cursor as step `step`. Collective.
  absl::Status save(TrainingState state, comm::Communicator& world, int64_t step,
                    const SftCursor& cursor, int64_t records);
  // Rank 0: exports `model` ("policy", a value model's "critic", a process reward model's "prm") of
  // the step saved last to <logging.run_dir>/hf in `dtype` (and a LoRA model's adapter to
  // <logging.run_dir>/adapter: export_run); returns what was written.
  absl::StatusOr<std::string> export_last(const std::string& model, at::ScalarType dtype) const;

 private:
  DataCheckpoints() = default;

  const core::Config* config_ = nullptr;
  std::string dir_;
  CheckpointSaveOptions save_options_;
  int64_t last_saved_ = -1;
};

}  // namespace flywheel::trainer
