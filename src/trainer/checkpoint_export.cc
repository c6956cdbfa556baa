// Exports of a checkpoint step directory (checkpoint.h): a Hugging Face directory (merged, for a
// LoRA model) or a PEFT adapter, read from every rank's file in one process.
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint_files.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/lora.h"
#include "flywheel/model/peft_adapter.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/trainer/checkpoint.h"

namespace flywheel::trainer {
namespace {

namespace fs = std::filesystem;
using checkpoint_files::kComplete;
using checkpoint_files::kState;
using checkpoint_files::rank_file;
using core::Json;

// A value-head model's config.json as transformers' classifiers have it, num_labels 1:
// <Arch>ForSequenceClassification (a critic or reward model, what the reward_model reward
// loads) or <Arch>ForTokenClassification (a process reward model, for process_reward_model).
absl::Status mark_classifier(const std::string& dir, const std::string& suffix) {
  const std::string path = (fs::path(dir) / "config.json").string();
  FLYWHEEL_ASSIGN_OR_RETURN(Json config, core::read_json_file(path));
  std::string arch;
  if (const Json* archs = config.find("architectures"); archs != nullptr && archs->is_array() &&
                                                        !archs->as_array().empty() &&
                                                        archs->as_array()[0].is_string()) {
    arch = archs->as_array()[0].as_string();
  }
  const std::string causal = "ForCausalLM";
  if (arch.size() > causal.size() &&
      arch.compare(arch.size() - causal.size(), causal.size(), causal) == 0) {
    arch = arch.substr(0, arch.size() - causal.size());
  }
  config.set("architectures", Json::array({Json(arch + suffix)}));
  config.set("num_labels", Json(int64_t{1}));
  return core::write_file_atomically(path, config.dump());
}

// A model of a checkpoint, read back in one process from every rank's file.
struct SavedModel {
  model::ModelConfig config;
  model::LoraOptions lora;  // rank 0: not LoRA
  double lora_dropout = 0;
  std::string base_path;  // LoRA: the frozen base weights' directory
  // The held parameters by name: every one, or with LoRA the adapters (the base is read from
  // base_path).
  std::map<std::string, at::Tensor> params;
  model::DecoderModel::TensorLookup base;

  absl::StatusOr<at::Tensor> lookup(const std::string& name) const {
    auto it = params.find(name);
    if (it != params.end()) return it->second;
    if (base) return base(name);
    return absl::NotFoundError(name);
  }
};

absl::StatusOr<SavedModel> read_saved_model(const std::string& step_dir,
                                            const std::string& model_name) {
  std::error_code ec;
  if (!fs::exists(fs::path(step_dir) / kComplete, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        step_dir, " is not a complete flywheel checkpoint (no ", kComplete, " marker)"));
  }
  const std::string state_path = (fs::path(step_dir) / kState).string();
  FLYWHEEL_ASSIGN_OR_RETURN(Json saved, core::read_json_file(state_path));
  const Json* world = saved.find("world_size");
  const Json* config_json = saved.find("model_config");
  const Json* models = saved.find("models");
  if (!world || !world->is_integer() || world->as_int() < 1 || !config_json || !models ||
      !models->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(state_path, ": malformed"));
  }
  const Json* units = models->find(model_name);
  if (units == nullptr || !units->is_array()) {
    std::string held;
    for (const auto& [name, u] : models->as_object()) absl::StrAppend(&held, " ", name);
    return absl::NotFoundError(
        absl::StrCat(step_dir, " holds no model '", model_name, "'; it holds:", held));
  }
  SavedModel out;
  FLYWHEEL_ASSIGN_OR_RETURN(out.config, model::ModelConfig::from_json(*config_json, state_path));
  const Json* lora = saved.find("lora") != nullptr ? saved.find("lora")->find(model_name) : nullptr;
  if (lora != nullptr) {
    FLYWHEEL_ASSIGN_OR_RETURN(LoraTraining training,
                              checkpoint_files::lora_from_json(*lora, state_path));
    out.lora = training.adapters;
    out.lora_dropout = training.dropout;
    out.base_path = training.base_path;
    absl::StatusOr<model::DecoderModel::TensorLookup> base = model::open_hf_weights(out.base_path);
    if (!base.ok()) {
      return absl::Status(base.status().code(),
                          absl::StrCat(step_dir, " holds LoRA adapters; their base weights (",
                                       out.base_path, ") do not open: ", base.status().message()));
    }
    out.base = *base;
  }
  const int W = static_cast<int>(world->as_int());
  std::vector<std::unique_ptr<model::SafetensorsFile>> files;
  for (int r = 0; r < W; ++r) {
    FLYWHEEL_ASSIGN_OR_RETURN(
        std::unique_ptr<model::SafetensorsFile> f,
        model::SafetensorsFile::open((fs::path(step_dir) / rank_file(r, W)).string()));
    files.push_back(std::move(f));
  }
  const bool value_head = model_name == "critic" || model_name == "prm";
  std::vector<std::pair<std::string, std::vector<model::ParamSpec>>> held;
  if (out.lora.enabled()) {
    for (auto& [name, specs] : decoder_units(out.config, false, out.lora)) {
      if (absl::EndsWith(name, ".lora")) held.emplace_back(name, specs);
    }
  } else {
    held = decoder_units(out.config, value_head);
  }
  for (const auto& [unit, specs] : held) {
    std::vector<at::Tensor> shards;
    for (int r = 0; r < W; ++r) {
      absl::StatusOr<at::Tensor> t = files[r]->tensor(model_name + "/" + unit);
      if (!t.ok()) {
        return absl::NotFoundError(
            absl::StrCat(files[r]->path(), ": no tensor '", model_name, "/", unit, "'"));
      }
      shards.push_back(*t);
    }
    at::Tensor full = at::cat(shards);
    int64_t offset = 0;
    for (const model::ParamSpec& spec : specs) {
      int64_t numel = 1;
      for (int64_t d : spec.shape) numel *= d;
      if (offset + numel > full.numel()) {
        return absl::InvalidArgumentError(absl::StrCat(
            step_dir, ": unit '", unit, "' holds ", full.numel(), " values, fewer than its ",
            "parameters need: the checkpoint does not match its model_config"));
      }
      out.params[spec.name] = full.narrow(0, offset, numel).view(spec.shape);
      offset += numel;
    }
  }
  return out;
}

}  // namespace

absl::Status export_adapter(const std::string& step_dir, const std::string& model_name,
                            const std::string& out_dir) {
  FLYWHEEL_ASSIGN_OR_RETURN(SavedModel held, read_saved_model(step_dir, model_name));
  if (!held.lora.enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", model_name, " of ", step_dir,
        " was trained without trainer.lora: it has no adapter to export (export the model)"));
  }
  std::vector<std::pair<std::string, at::Tensor>> adapters(held.params.begin(), held.params.end());
  FLYWHEEL_RETURN_IF_ERROR(model::write_peft_adapter(
      out_dir, held.lora, fs::absolute(held.base_path).string(), adapters, held.lora_dropout));
  return model::copy_hf_side_files(step_dir, out_dir).status();
}

absl::Status export_checkpoint(const std::string& step_dir, const std::string& model_name,
                               const std::string& out_dir, at::ScalarType dtype,
                               const model::SaveOptions& save) {
  FLYWHEEL_ASSIGN_OR_RETURN(SavedModel held, read_saved_model(step_dir, model_name));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::HfWriter> writer,
                            model::HfWriter::create(out_dir, held.config, dtype, save));
  const bool prm = model_name == "prm";  // a process reward model
  for (const model::ParamSpec& spec : prm || model_name == "critic"
                                          ? critic_parameter_specs(held.config)
                                          : model::decoder_parameter_specs(held.config)) {
    FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor value, held.lookup(spec.name));
    auto a = held.params.find(model::lora_a_name(spec.name));
    if (held.lora.enabled() && a != held.params.end()) {  // LoRA: the merged weight
      value = model::merge_lora(value, a->second, held.params.at(model::lora_b_name(spec.name)),
                                held.lora.scale());
    }
    FLYWHEEL_RETURN_IF_ERROR(writer->add(spec.name, value));
  }
  // transformers' token classifiers have a bias, which flywheel's head does not train.
  if (prm) FLYWHEEL_RETURN_IF_ERROR(writer->add("score.bias", at::zeros({1}, at::kFloat)));
  FLYWHEEL_RETURN_IF_ERROR(writer->finish());
  if (model_name == "critic") {
    FLYWHEEL_RETURN_IF_ERROR(mark_classifier(out_dir, "ForSequenceClassification"));
  }
  if (prm) FLYWHEEL_RETURN_IF_ERROR(mark_classifier(out_dir, "ForTokenClassification"));
  return model::copy_hf_side_files(step_dir, out_dir).status();
}

absl::StatusOr<std::string> export_run(const std::string& step_dir, const std::string& model,
                                       const std::string& run_dir, at::ScalarType dtype) {
  const std::string hf = (fs::path(run_dir) / "hf").string();
  FLYWHEEL_RETURN_IF_ERROR(export_checkpoint(step_dir, model, hf, dtype));
  FLYWHEEL_ASSIGN_OR_RETURN(Json saved,
                            core::read_json_file((fs::path(step_dir) / kState).string()));
  const Json* lora = saved.find("lora");
  if (lora == nullptr || lora->find(model) == nullptr) return hf;
  const std::string adapter = (fs::path(run_dir) / "adapter").string();
  FLYWHEEL_RETURN_IF_ERROR(export_adapter(step_dir, model, adapter));
  return absl::StrCat(hf, " (merged) and ", adapter, " (PEFT adapter)");
}

}  // namespace flywheel::trainer
