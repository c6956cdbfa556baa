#include "flywheel/model/hf_checkpoint.h"

#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;

}  // namespace

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

absl::StatusOr<std::unique_ptr<DecoderModel>> load_hf_model(const std::string& dir,
                                                            const DecoderOptions& options) {
  fs::path root(dir);
  absl::StatusOr<ModelConfig> config = ModelConfig::from_file((root / "config.json").string());
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<DecoderModel>> model = DecoderModel::create(*config, options);
  if (!model.ok()) return model.status();

  // name -> file that holds it
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> by_name;
  fs::path index_path = root / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    absl::StatusOr<core::Json> index = core::read_json_file(index_path.string());
    if (!index.ok()) return index.status();
    const core::Json* weight_map = index->find("weight_map");
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
        absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened =
            SafetensorsFile::open((root / file.as_string()).string());
        if (!opened.ok()) return opened.status();
        shard = std::move(*opened);
      }
      by_name[name] = shard;
    }
  } else {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened =
        SafetensorsFile::open((root / "model.safetensors").string());
    if (!opened.ok()) return opened.status();
    std::shared_ptr<SafetensorsFile> file = std::move(*opened);
    for (const auto& entry : file->entries()) by_name[entry.name] = file;
  }
  absl::Status loaded = (*model)->load([&](const std::string& name) -> absl::StatusOr<at::Tensor> {
    auto it = by_name.find(name);
    if (it == by_name.end()) return absl::NotFoundError(name);
    return it->second->tensor(name);
  });
  if (!loaded.ok()) {
    return absl::Status(loaded.code(), absl::StrCat(dir, ": ", loaded.message()));
  }
  return model;
}

absl::Status save_hf_model(const DecoderModel& model, const std::string& dir,
                           const SaveOptions& options) {
  fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));

  ModelConfig config = model.config();
  config.torch_dtype = dtype_name(model.options().dtype);
  std::string config_text = config.to_json().dump() + "\n";
  absl::Status status = core::write_file_atomically((root / "config.json").string(), config_text);
  if (!status.ok()) return status;

  // Shards in parameter order, each at most max_shard_bytes (a larger tensor gets its own).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shard_bytes = 0;
  int64_t total_bytes = 0;
  for (const auto& [name, tensor] : model.named_parameters()) {
    const int64_t bytes = tensor.numel() * tensor.element_size();
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, tensor);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  if (shards.size() == 1) {
    fs::remove(root / "model.safetensors.index.json", ec);
    return write_safetensors((root / "model.safetensors").string(), shards[0]);
  }
  core::Json weight_map = core::Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    status = write_safetensors((root / file).string(), shards[i]);
    if (!status.ok()) return status;
    for (const auto& [name, tensor] : shards[i]) weight_map.set(name, core::Json(file));
  }
  core::Json index = core::Json::object();
  core::Json metadata = core::Json::object();
  metadata.set("total_size", core::Json(total_bytes));
  index.set("metadata", std::move(metadata));
  index.set("weight_map", std::move(weight_map));
  fs::remove(root / "model.safetensors", ec);
  return core::write_file_atomically((root / "model.safetensors.index.json").string(),
                                     index.dump() + "\n");
}

}  // namespace flywheel::model
