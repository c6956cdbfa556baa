// LoRA adapters as Hugging Face PEFT saves them: a directory with adapter_config.json
// (peft_type "LORA", r, lora_alpha, target_modules, base_model_name_or_path) and
// adapter_model.safetensors, whose tensors are named "base_model.model.<module>.lora_A.weight"
// and "...lora_B.weight" (PEFT's names of a causal LM's modules).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"
#include "flywheel/model/lora.h"

namespace flywheel::model {

inline constexpr char kPeftConfigFile[] = "adapter_config.json";
inline constexpr char kPeftWeightsFile[] = "adapter_model.safetensors";

struct PeftAdapter {
  LoraOptions lora;       // rank, alpha, targets (merged: true)
  std::string base_path;  // base_model_name_or_path, relative ones resolved against the directory
  // The adapter tensors by flywheel's names (lora_a_name / lora_b_name of the base weights).
  DecoderModel::TensorLookup tensors;
};

// Whether `dir` holds adapter_config.json.
bool is_peft_adapter(const std::string& dir);
// The directory whose config.json describes the model `dir` loads as: a PEFT adapter's base
// (when its adapter_config.json reads), else `dir`.
std::string model_config_dir(const std::string& dir);

// Writes `adapters` (flywheel names, any float dtype; written as float32) to `dir` in PEFT's
// layout with `lora` and `base_path`. Errors name the file that could not be written.
absl::Status write_peft_adapter(const std::string& dir, const LoraOptions& lora,
                                const std::string& base_path,
                                const std::vector<std::pair<std::string, at::Tensor>>& adapters,
                                double dropout = 0);

// Reads a PEFT LoRA directory. InvalidArgument naming the file and key for anything flywheel does
// not run: another peft_type, fan_in_fan_out, rsLoRA, DoRA, per-module ranks, biases, modules
// to save, unknown target modules.
absl::StatusOr<PeftAdapter> read_peft_adapter(const std::string& dir);

// A model of the adapter's base with the adapter merged into its weights: loads the base
// (config.json and weights of base_path) into a model with `options` plus the adapter
// (lora merged), so that it runs exactly like the merged export of the same adapter.
absl::StatusOr<std::unique_ptr<DecoderModel>> load_peft_model(const std::string& dir,
                                                              DecoderOptions options);

}  // namespace flywheel::model
