// The layout of a checkpoint step directory (checkpoint.h), shared by saving and loading
// (checkpoint.cc) and exporting (checkpoint_export.cc). Private to flywheel_trainer.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer::checkpoint_files {

inline constexpr char kComplete[] = "COMPLETE";
inline constexpr char kState[] = "trainer_state.json";

// "rank-<r>-of-<W>.safetensors".
std::string rank_file(int rank, int world);

// A LoRA model's entry under "lora" in trainer_state.json (rank, alpha, dropout, targets,
// base_path), and back; InvalidArgument naming `path` for a malformed one.
core::Json lora_json(const LoraTraining& lora);
absl::StatusOr<LoraTraining> lora_from_json(const core::Json& j, const std::string& path);

}  // namespace flywheel::trainer::checkpoint_files
