// Hugging Face model directories: config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {

// Loads config.json and the weights of `dir` into a model with `options` (weights are converted
// to its dtype and device). Errors name the file: missing config or weights, a corrupt
// safetensors file, a missing or misshapen tensor, an index naming a missing shard.
absl::StatusOr<std::unique_ptr<DecoderModel>> load_hf_model(const std::string& dir,
                                                            const DecoderOptions& options);

struct SaveOptions {
  int64_t max_shard_bytes = int64_t{5} << 30;  // larger models are split into shards + index
};

// Writes config.json (torch_dtype = the model dtype) and safetensors shards. Deterministic:
// saving the same weights twice gives identical files. Leaves other files of `dir` alone.
absl::Status save_hf_model(const DecoderModel& model, const std::string& dir,
                           const SaveOptions& options = {});

// at::ScalarType for "float32" | "bfloat16" | "float16" (also accepts torch_dtype spellings
// "float", "bf16", "half", "fp16", "fp32").
absl::StatusOr<at::ScalarType> parse_dtype(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

}  // namespace flywheel::model
