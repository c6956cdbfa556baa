// Hugging Face model directories: config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {

// Loads config.json and the weights of `dir` into a model with `options` (weights are converted
// to its dtype and device). Errors name the file: missing config or weights, a corrupt
// safetensors file, a missing or misshapen tensor, an index naming a missing shard, and (before
// anything is allocated) a config.json that declares more layers than the weights hold. A PEFT
// LoRA directory (adapter_config.json) loads as its base with the adapter merged
// (peft_adapter.h).
absl::StatusOr<std::unique_ptr<DecoderModel>> load_hf_model(const std::string& dir,
                                                            const DecoderOptions& options);

// The weights of a Hugging Face directory (model.safetensors, or the shards its
// model.safetensors.index.json lists) by name, mapped: NotFound for a name it does not have.
// Errors name the file: no weights, a corrupt safetensors file, an index naming a missing
// shard.
// InvalidArgument naming `config_path` when `config` declares more layers than the tensor
// `names` of its weights hold (model.layers.N.*), or a mixture of experts more experts than any
// layer holds (model.layers.N.mlp.experts.E.*): checked before a model is allocated, so that
// memory follows the checkpoint rather than a config.json's claim.
absl::Status check_held_layers(const ModelConfig& config, const std::vector<std::string>& names,
                               const std::string& config_path);

// `names`, when given, gets every tensor name the directory holds.
absl::StatusOr<DecoderModel::TensorLookup> open_hf_weights(
    const std::string& dir, std::vector<std::string>* names = nullptr);

struct SaveOptions {
  int64_t max_shard_bytes = int64_t{5} << 30;  // larger models are split into shards + index
};

// Writes a Hugging Face directory tensor by tensor, holding at most one shard in memory:
//   auto w = HfWriter::create(dir, config, dtype);  add(name, t)...;  finish();
// The tensors are written in `dtype`, as one model.safetensors or, past max_shard_bytes,
// model-0000i-of-0000n.safetensors shards plus the index; config.json last.
class HfWriter {
 public:
  static absl::StatusOr<std::unique_ptr<HfWriter>> create(const std::string& dir,
                                                          const ModelConfig& config,
                                                          at::ScalarType dtype,
                                                          const SaveOptions& options = {});
  absl::Status add(const std::string& name, const at::Tensor& tensor);
  absl::Status finish();

 private:
  HfWriter() = default;
  absl::Status flush();

  std::string dir_;
  ModelConfig config_;
  at::ScalarType dtype_ = at::kFloat;
  SaveOptions options_;
  std::vector<std::pair<std::string, at::Tensor>> pending_;
  int64_t pending_bytes_ = 0, total_bytes_ = 0;
  std::vector<std::vector<std::string>> shard_names_;  // tensor names of each written shard
};

// Writes config.json (torch_dtype = the model dtype) and safetensors shards. Deterministic:
// saving the same weights twice gives identical files. Leaves other files of `dir` alone. A model
// with LoRA adapters is written merged (W + scale * B A, no adapter tensors).
absl::Status save_hf_model(const DecoderModel& model, const std::string& dir,
                           const SaveOptions& options = {});

// The files of a Hugging Face directory besides config.json and the weights that a copy of the
// model needs: tokenizer files, generation config.
inline constexpr const char* kHfSideFiles[] = {"tokenizer.json",
                                               "tokenizer_config.json",
                                               "special_tokens_map.json",
                                               "generation_config.json",
                                               "vocab.json",
                                               "merges.txt",
                                               "char_tokenizer.json"};

// The paths of kHfSideFiles present in `dir`. InvalidArgument for one that is not a regular file
// (a FIFO would block a copy, a device would never end).
absl::StatusOr<std::vector<std::string>> hf_side_files(const std::string& dir);

// Copies the hf_side_files of `from_dir` into `to_dir` (overwriting), returning how many.
// Unavailable naming the file that could not be copied.
absl::StatusOr<int> copy_hf_side_files(const std::string& from_dir, const std::string& to_dir);

// at::ScalarType for "float32" | "bfloat16" | "float16" (also accepts torch_dtype spellings
// "float", "bf16", "half", "fp16", "fp32").
absl::StatusOr<at::ScalarType> parse_dtype(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

// The eos ids of `config` (config.json) and of `dir`'s generation_config.json (optional: an
// unreadable one adds nothing), without repeats.
std::vector<int64_t> generation_eos_ids(const ModelConfig& config, const std::string& dir);

}  // namespace flywheel::model
