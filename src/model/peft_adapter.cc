#include "flywheel/model/peft_adapter.h"

#include <filesystem>
#include <map>
#include <memory>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;
using core::Json;

constexpr char kPrefix[] = "base_model.model.";

// Rejects a key whose value is set to something other than its "off" spelling.
absl::Status refuse_set(const Json& config, const std::string& path, const std::string& key) {
  const Json* v = config.find(key);
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  const bool off =
      (v->is_bool() && !v->as_bool()) || (v->is_string() && v->as_string() == "none") ||
      (v->is_object() && v->as_object().empty()) || (v->is_array() && v->as_array().empty());
  if (off) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": '", key, "' is set, which flywheel's LoRA does not implement"));
}

// adapter_config.json of `dir`: the adapter's shape and base (its tensors left unopened).
absl::StatusOr<PeftAdapter> read_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kPeftConfigFile).string();
  FLYWHEEL_ASSIGN_OR_RETURN(Json config, core::read_json_file(path));
  const Json* type = config.find("peft_type");
  if (type == nullptr || type->as_string() != "LORA") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": peft_type must be \"LORA\" (the only adapter flywheel runs)"));
  }
  for (const char* key : {"fan_in_fan_out", "use_rslora", "use_dora", "modules_to_save",
                          "rank_pattern", "alpha_pattern", "layers_to_transform"}) {
    FLYWHEEL_RETURN_IF_ERROR(refuse_set(config, path, key));
  }
  if (const Json* bias = config.find("bias"); bias != nullptr && bias->as_string() != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": 'bias' must be \"none\" (adapter biases are not implemented)"));
  }
  const Json* r = config.find("r");
  const Json* alpha = config.find("lora_alpha");
  const Json* targets = config.find("target_modules");
  if (r == nullptr || !r->is_integer() || r->as_int() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'r' must be an integer >= 1"));
  }
  if (alpha == nullptr || !alpha->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'lora_alpha' must be a number"));
  }
  if (targets == nullptr || !targets->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": 'target_modules' must be a list of projection names"));
  }
  PeftAdapter adapter;
  adapter.lora.rank = r->as_int();
  adapter.lora.alpha = alpha->as_double();
  for (const Json& t : targets->as_array()) adapter.lora.targets.push_back(t.as_string());
  const Json* base = config.find("base_model_name_or_path");
  const std::string base_path = base != nullptr ? base->as_string() : std::string();
  if (base_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": 'base_model_name_or_path' must name the base model's directory"));
  }
  adapter.base_path =
      fs::path(base_path).is_absolute() ? base_path : (fs::path(dir) / base_path).string();
  return adapter;
}

}  // namespace

bool is_peft_adapter(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kPeftConfigFile, ec);
}

std::string model_config_dir(const std::string& dir) {
  if (!is_peft_adapter(dir)) return dir;
  absl::StatusOr<PeftAdapter> adapter = read_config(dir);
  return adapter.ok() ? adapter->base_path : dir;
}

absl::Status write_peft_adapter(const std::string& dir, const LoraOptions& lora,
                                const std::string& base_path,
                                const std::vector<std::pair<std::string, at::Tensor>>& adapters,
                                double dropout) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [name, t] : adapters) {
    tensors.emplace_back(kPrefix + name, t.to(at::kFloat).contiguous());
  }
  FLYWHEEL_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / kPeftWeightsFile).string(), tensors));
  Json targets = Json::array();
  for (const std::string& t : lora.targets) targets.push_back(Json(t));
  Json config = Json::object();
  config.set("peft_type", Json("LORA"));
  config.set("task_type", Json("CAUSAL_LM"));
  config.set("base_model_name_or_path", Json(base_path));
  config.set("r", Json(lora.rank));
  config.set("lora_alpha", Json(lora.alpha));
  config.set("lora_dropout", Json(dropout));
  config.set("target_modules", std::move(targets));
  config.set("bias", Json("none"));
  config.set("fan_in_fan_out", Json(false));
  config.set("use_rslora", Json(false));
  config.set("use_dora", Json(false));
  config.set("inference_mode", Json(true));
  config.set("modules_to_save", Json());
  return core::write_file_atomically((fs::path(dir) / kPeftConfigFile).string(), config.dump());
}

absl::StatusOr<PeftAdapter> read_peft_adapter(const std::string& dir) {
  FLYWHEEL_ASSIGN_OR_RETURN(PeftAdapter adapter, read_config(dir));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> opened,
                            SafetensorsFile::open((fs::path(dir) / kPeftWeightsFile).string()));
  std::shared_ptr<SafetensorsFile> file = std::move(opened);
  adapter.tensors = [file](const std::string& name) -> absl::StatusOr<at::Tensor> {
    if (!file->contains(kPrefix + name)) {
      return absl::NotFoundError(absl::StrCat(file->path(), " lacks ", kPrefix, name));
    }
    return file->tensor(kPrefix + name);
  };
  return adapter;
}

absl::StatusOr<std::unique_ptr<DecoderModel>> load_peft_model(const std::string& dir,
                                                              DecoderOptions options) {
  FLYWHEEL_ASSIGN_OR_RETURN(PeftAdapter adapter, read_peft_adapter(dir));
  options.lora = adapter.lora;
  options.lora.merged = true;
  FLYWHEEL_ASSIGN_OR_RETURN(
      ModelConfig config,
      ModelConfig::from_file((fs::path(adapter.base_path) / "config.json").string()));
  FLYWHEEL_ASSIGN_OR_RETURN(DecoderModel::TensorLookup base, open_hf_weights(adapter.base_path));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model,
                            DecoderModel::create(config, options));  // validates options.lora
  auto lookup = [&](const std::string& name) -> absl::StatusOr<at::Tensor> {
    if (!is_lora_name(name)) return base(name);
    // load() keeps an adapter a lookup lacks at zero; here every targeted one must be there.
    absl::StatusOr<at::Tensor> t = adapter.tensors(name);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.status().message(), " (adapter_config.json targets it)"));
    }
    return t;
  };
  absl::Status loaded = model->load(lookup);
  if (!loaded.ok()) return absl::Status(loaded.code(), absl::StrCat(dir, ": ", loaded.message()));
  return model;
}

}  // namespace flywheel::model
