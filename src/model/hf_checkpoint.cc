#include "flywheel/model/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/param_spec.h"
#include "flywheel/model/peft_adapter.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<std::vector<std::string>> hf_side_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const char* name : kHfSideFiles) {
    const fs::path from = fs::path(dir) / name;
    struct stat st;
    if (::stat(from.c_str(), &st) != 0) continue;  // absent
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot copy '", from.string(), "': it is ",
                                                     core::file_type_name(st.st_mode),
                                                     ", not a regular file"));
    }
    files.push_back(from.string());
  }
  return files;
}

absl::StatusOr<int> copy_hf_side_files(const std::string& from_dir, const std::string& to_dir) {
  absl::StatusOr<std::vector<std::string>> files = hf_side_files(from_dir);
  if (!files.ok()) return files.status();
  for (const std::string& file : *files) {
    std::error_code ec;
    fs::copy_file(file, fs::path(to_dir) / fs::path(file).filename(),
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot copy ", file, ": ", ec.message()));
  }
  return static_cast<int>(files->size());
}

absl::StatusOr<at::ScalarType> parse_dtype(const std::string& name) {
  if (name == "float32" || name == "float" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "half" || name == "fp16") return at::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; expected float32, bfloat16 or float16"));
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return "float32";
  }
}

namespace {

// How many layers `names` (tensor names) hold: the count of distinct N in "model.layers.N.".
int64_t held_layers(const std::vector<std::string>& names) {
  std::set<int64_t> layers;
  for (const std::string& name : names) {
    const int64_t layer = layer_index(name);
    if (layer >= 0) layers.insert(layer);
  }
  return static_cast<int64_t>(layers.size());
}

// How many experts of one layer `names` hold at most: distinct E in "model.layers.N.mlp.experts.E."
// for any N.
int64_t held_experts(const std::vector<std::string>& names) {
  std::map<int64_t, std::set<int64_t>> by_layer;
  for (const std::string& name : names) {
    std::string_view in_layer;
    const int64_t layer = layer_index(name, &in_layer);
    absl::string_view rest(in_layer.data(), in_layer.size());
    int64_t expert = 0;
    if (layer < 0 || !absl::ConsumePrefix(&rest, "mlp.experts.")) continue;
    const size_t end = rest.find('.');
    if (end != absl::string_view::npos && absl::SimpleAtoi(rest.substr(0, end), &expert)) {
      by_layer[layer].insert(expert);
    }
  }
  size_t most = 0;
  for (const auto& [layer, experts] : by_layer) most = std::max(most, experts.size());
  return static_cast<int64_t>(most);
}

}  // namespace

absl::Status check_held_layers(const ModelConfig& config, const std::vector<std::string>& names,
                               const std::string& config_path) {
  const int64_t held = held_layers(names);
  if (config.num_hidden_layers > held) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": num_hidden_layers ", config.num_hidden_layers,
                     " but the weights hold ", held, " layer(s) (model.layers.N.*)"));
  }
  if (config.num_moe_layers() > 0) {
    const int64_t experts = held_experts(names);
    if (config.num_experts > experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_path, ": num_experts ", config.num_experts, " but the weights hold at most ",
          experts, " expert(s) per layer (model.layers.N.mlp.experts.E.*)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DecoderModel::TensorLookup> open_hf_weights(const std::string& dir,
                                                           std::vector<std::string>* names) {
  fs::path root(dir);
  // name -> file that holds it
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;
  auto by_name = std::make_shared<std::map<std::string, std::shared_ptr<SafetensorsFile>>>();
  fs::path index_path = root / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    FLYWHEEL_ASSIGN_OR_RETURN(core::Json index, core::read_json_file(index_path.string()));
    const core::Json* weight_map = index.find("weight_map");
    if (weight_map == nullptr || !weight_map->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": no weight_map"));
    }
    for (const auto& [name, file] : weight_map->as_object()) {
      if (!file.is_string() || file.as_string().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": weight_map.", name, " is not a shard file name"));
      }
      auto& shard = files[file.as_string()];
      if (!shard) {
        FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> opened,
                                  SafetensorsFile::open((root / file.as_string()).string()));
        shard = std::move(opened);
      }
      (*by_name)[name] = shard;
    }
  } else {
    FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> opened,
                              SafetensorsFile::open((root / "model.safetensors").string()));
    std::shared_ptr<SafetensorsFile> file = std::move(opened);
    for (const auto& entry : file->entries()) (*by_name)[entry.name] = file;
  }
  if (names != nullptr) {
    for (const auto& [name, file] : *by_name) names->push_back(name);
  }
  return DecoderModel::TensorLookup(
      [by_name](const std::string& name) -> absl::StatusOr<at::Tensor> {
        auto it = by_name->find(name);
        if (it == by_name->end()) return absl::NotFoundError(name);
        return it->second->tensor(name);
      });
}

absl::StatusOr<std::unique_ptr<DecoderModel>> load_hf_model(const std::string& dir,
                                                            const DecoderOptions& options) {
  if (is_peft_adapter(dir)) return load_peft_model(dir, options);
  fs::path root(dir);
  absl::StatusOr<ModelConfig> config = ModelConfig::from_file((root / "config.json").string());
  if (!config.ok()) return config.status();
  std::vector<std::string> names;
  FLYWHEEL_ASSIGN_OR_RETURN(DecoderModel::TensorLookup weights, open_hf_weights(dir, &names));
  FLYWHEEL_RETURN_IF_ERROR(check_held_layers(*config, names, (root / "config.json").string()));
  absl::StatusOr<std::unique_ptr<DecoderModel>> model = DecoderModel::create(*config, options);
  if (!model.ok()) return model.status();
  absl::Status loaded = (*model)->load(weights);
  if (!loaded.ok()) {
    return absl::Status(loaded.code(), absl::StrCat(dir, ": ", loaded.message()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<HfWriter>> HfWriter::create(const std::string& dir,
                                                           const ModelConfig& config,
                                                           at::ScalarType dtype,
                                                           const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  std::unique_ptr<HfWriter> writer(new HfWriter());
  writer->dir_ = dir;
  writer->config_ = config;
  writer->dtype_ = dtype;
  writer->options_ = options;
  return writer;
}

absl::Status HfWriter::add(const std::string& name, const at::Tensor& tensor) {
  at::Tensor t = tensor.to(dtype_).contiguous();
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  if (!pending_.empty() && pending_bytes_ + bytes > options_.max_shard_bytes) {
    FLYWHEEL_RETURN_IF_ERROR(flush());
  }
  pending_.emplace_back(name, std::move(t));
  pending_bytes_ += bytes;
  total_bytes_ += bytes;
  return absl::OkStatus();
}

// Shards are written under a provisional name; finish() names them once their count is known.
absl::Status HfWriter::flush() {
  if (pending_.empty()) return absl::OkStatus();
  const std::string file = absl::StrFormat("shard-%05d.partial", shard_names_.size());
  FLYWHEEL_RETURN_IF_ERROR(write_safetensors((fs::path(dir_) / file).string(), pending_));
  shard_names_.emplace_back();
  for (const auto& [name, t] : pending_) shard_names_.back().push_back(name);
  pending_.clear();
  pending_bytes_ = 0;
  return absl::OkStatus();
}

absl::Status HfWriter::finish() {
  FLYWHEEL_RETURN_IF_ERROR(flush());
  const fs::path root(dir_);
  std::error_code ec;
  auto rename = [&](size_t i, const std::string& to) -> absl::Status {
    fs::rename(root / absl::StrFormat("shard-%05d.partial", i), root / to, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot rename a shard in '", dir_, "'"));
    return absl::OkStatus();
  };
  if (shard_names_.size() <= 1) {
    fs::remove(root / "model.safetensors.index.json", ec);
    if (shard_names_.empty()) {
      FLYWHEEL_RETURN_IF_ERROR(write_safetensors((root / "model.safetensors").string(), {}));
    } else {
      FLYWHEEL_RETURN_IF_ERROR(rename(0, "model.safetensors"));
    }
  } else {
    core::Json weight_map = core::Json::object();
    for (size_t i = 0; i < shard_names_.size(); ++i) {
      const std::string file =
          absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shard_names_.size());
      FLYWHEEL_RETURN_IF_ERROR(rename(i, file));
      for (const std::string& name : shard_names_[i]) weight_map.set(name, core::Json(file));
    }
    core::Json index = core::Json::object();
    core::Json metadata = core::Json::object();
    metadata.set("total_size", core::Json(total_bytes_));
    index.set("metadata", std::move(metadata));
    index.set("weight_map", std::move(weight_map));
    fs::remove(root / "model.safetensors", ec);
    FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(
        (root / "model.safetensors.index.json").string(), index.dump() + "\n"));
  }
  ModelConfig config = config_;
  config.torch_dtype = dtype_name(dtype_);
  return core::write_file_atomically((root / "config.json").string(),
                                     config.to_json().dump() + "\n");
}

absl::Status save_hf_model(const DecoderModel& model, const std::string& dir,
                           const SaveOptions& options) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<HfWriter> writer,
                            HfWriter::create(dir, model.config(), model.options().dtype, options));
  std::map<std::string, at::Tensor> adapters;
  for (const auto& [name, tensor] : model.named_parameters()) {
    if (is_lora_name(name)) adapters[name] = tensor;
  }
  for (const auto& [name, tensor] : model.named_parameters()) {
    if (is_lora_name(name)) continue;
    auto a = adapters.find(lora_a_name(name));
    if (a == adapters.end()) {
      FLYWHEEL_RETURN_IF_ERROR(writer->add(name, tensor));
      continue;
    }
    FLYWHEEL_RETURN_IF_ERROR(
        writer->add(name, merge_lora(tensor, a->second, adapters.at(lora_b_name(name)),
                                     model.options().lora.scale())));
  }
  return writer->finish();
}

std::vector<int64_t> generation_eos_ids(const ModelConfig& model_config, const std::string& dir) {
  std::vector<int64_t> ids = model_config.eos_token_ids;
  // generation_config.json is optional; an unreadable one adds nothing.
  absl::StatusOr<core::Json> config =
      core::read_json_file((std::filesystem::path(dir) / "generation_config.json").string());
  if (!config.ok()) return ids;
  if (const core::Json* eos = config->find("eos_token_id")) {
    std::vector<core::Json> values =
        eos->is_array() ? eos->as_array() : std::vector<core::Json>{*eos};
    for (const core::Json& v : values) {
      if (v.is_integer() && std::find(ids.begin(), ids.end(), v.as_int()) == ids.end()) {
        ids.push_back(v.as_int());
      }
    }
  }
  return ids;
}

}  // namespace flywheel::model
