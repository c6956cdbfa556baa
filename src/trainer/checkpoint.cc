#include "flywheel/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/lora.h"
#include "flywheel/model/peft_adapter.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::trainer {
namespace {

namespace fs = std::filesystem;
using core::Json;

constexpr char kFormat[] = "flywheel.checkpoint.v1";
constexpr char kComplete[] = "COMPLETE";
constexpr char kState[] = "trainer_state.json";

std::string rank_file(int rank, int world) {
  return absl::StrFormat("rank-%05d-of-%05d.safetensors", rank, world);
}

// fsync of a file or directory (the rename of a checkpoint is durable only after both).
absl::Status sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open '", path.string(), "'"));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot fsync '", path.string(), "'"));
  return absl::OkStatus();
}

absl::Status write_synced(const fs::path& path, const std::string& text) {
  FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(path.string(), text));
  return sync_path(path);
}

// What a learner checkpoints.
TrainingState state_of(Learner& learner) {
  TrainingState state;
  state.models = {{"policy", &learner.policy()}};
  if (learner.reference()) state.models.emplace_back("reference", learner.reference());
  if (learner.critic()) state.models.emplace_back("critic", learner.critic());
  state.optimizers = {{"policy", &learner.optimizer()}};
  if (learner.critic_optimizer())
    state.optimizers.emplace_back("critic", learner.critic_optimizer());
  state.scalars["version"] = static_cast<double>(learner.version());
  state.scalars["kl_beta"] = learner.kl_beta();
  state.scalars["consecutive_skips"] = static_cast<double>(learner.consecutive_skips());
  return state;
}

// Every rank learns whether all succeeded; the first error wins (rank order).
absl::Status agree(comm::Communicator& comm, const absl::Status& mine) {
  at::Tensor failed = at::full({1}, mine.ok() ? 0 : comm.rank() + 1, at::kLong);
  at::Tensor first = at::full({1}, mine.ok() ? comm.size() + 1 : comm.rank() + 1, at::kLong);
  comm.all_reduce_host(failed, comm::ReduceOp::kMax);
  comm.all_reduce_host(first, comm::ReduceOp::kMin);
  if (failed.item<int64_t>() == 0) return absl::OkStatus();
  if (!mine.ok()) return mine;
  return absl::UnavailableError(
      absl::StrCat("learner rank ", first.item<int64_t>() - 1, " failed (see its log)"));
}

// A LoRA model's adapters in trainer_state.json: enough to export them without the config.
Json lora_json(const LoraTraining& lora) {
  Json j = Json::object();
  j.set("rank", Json(lora.adapters.rank));
  j.set("alpha", Json(lora.adapters.alpha));
  j.set("dropout", Json(lora.dropout));
  Json targets = Json::array();
  for (const std::string& t : lora.adapters.targets) targets.push_back(Json(t));
  j.set("targets", std::move(targets));
  j.set("base_path", Json(lora.base_path));
  return j;
}

absl::StatusOr<LoraTraining> lora_from_json(const Json& j, const std::string& path) {
  const Json* rank = j.find("rank");
  const Json* alpha = j.find("alpha");
  const Json* targets = j.find("targets");
  const Json* base = j.find("base_path");
  if (!rank || !rank->is_integer() || !alpha || !alpha->is_number() || !targets ||
      !targets->is_array() || !base || !base->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed 'lora' entry"));
  }
  LoraTraining lora;
  lora.adapters.rank = rank->as_int();
  lora.adapters.alpha = alpha->as_double();
  for (const Json& t : targets->as_array()) lora.adapters.targets.push_back(t.as_string());
  if (const Json* dropout = j.find("dropout")) lora.dropout = dropout->as_double();
  lora.base_path = base->as_string();
  return lora;
}

Json state_json(const TrainingState& state, int64_t step, int world) {
  Json j = Json::object();
  j.set("format", Json(kFormat));
  j.set("step", Json(step));
  j.set("world_size", Json(static_cast<int64_t>(world)));
  Json scalars = Json::object();
  for (const auto& [name, value] : state.scalars) scalars.set(name, Json(value));
  j.set("scalars", std::move(scalars));
  Json steps = Json::object();
  for (auto& [name, optimizer] : state.optimizers) steps.set(name, Json(optimizer->steps()));
  j.set("optimizer_steps", std::move(steps));
  Json models = Json::object();
  Json adapters = Json::object();  // LoRA models: their adapters' shape and frozen base
  for (auto& [name, model] : state.models) {
    Json units = Json::array();
    for (const FlatUnit* unit : model->trainable_units()) {
      Json u = Json::object();
      u.set("name", Json(unit->name()));
      u.set("numel", Json(unit->numel()));
      u.set("shard_numel", Json(unit->shard_numel()));
      units.push_back(std::move(u));
    }
    models.set(name, std::move(units));
    if (model->has_adapters()) adapters.set(name, lora_json(model->options().lora));
  }
  j.set("models", std::move(models));
  if (!adapters.as_object().empty()) j.set("lora", std::move(adapters));
  if (!state.models.empty()) j.set("model_config", state.models.front().second->config().to_json());
  return j;
}

absl::Status write_rank_file(const TrainingState& state, const fs::path& path) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [prefix, model] : state.models) {
    for (const FlatUnit* unit : model->trainable_units()) {
      tensors.emplace_back(prefix + "/" + unit->name(), unit->shard().detach().cpu());
    }
  }
  for (auto& [prefix, optimizer] : state.optimizers) {
    for (const auto& [name, t] : optimizer->state()) {
      tensors.emplace_back(prefix + "_optimizer/" + name, t.cpu());
    }
  }
  FLYWHEEL_RETURN_IF_ERROR(model::write_safetensors(path.string(), tensors));
  return sync_path(path);
}

absl::StatusOr<int64_t> step_of(const std::string& dirname) {
  int64_t step = 0;
  if (dirname.rfind("step_", 0) != 0 || !absl::SimpleAtoi(dirname.substr(5), &step)) {
    return absl::InvalidArgumentError("not a step directory");
  }
  return step;
}

// Complete step directories under `dir`, oldest first.
std::vector<std::pair<int64_t, fs::path>> complete_steps(const std::string& dir, bool warn) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    absl::StatusOr<int64_t> step = step_of(entry.path().filename().string());
    if (!step.ok() || !entry.is_directory(ec)) continue;
    if (!fs::exists(entry.path() / kComplete, ec)) {
      if (warn) {
        FLYWHEEL_LOG_WARN("checkpoint %s has no %s marker (a save was interrupted); skipping it",
                          entry.path().string(), kComplete);
      }
      continue;
    }
    out.emplace_back(*step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::Status save_checkpoint(Learner& learner, const std::string& dir, int64_t step,
                             const CheckpointSaveOptions& options) {
  return save_checkpoint(state_of(learner), learner.policy().comm(), dir, step, options);
}

absl::Status save_checkpoint(const TrainingState& state, comm::Communicator& comm,
                             const std::string& dir, int64_t step,
                             const CheckpointSaveOptions& options) {
  const fs::path final_dir = fs::path(dir) / absl::StrCat("step_", step);
  const fs::path tmp = fs::path(dir) / absl::StrCat("step_", step, ".tmp");
  std::error_code ec;
  absl::Status s;
  if (comm.rank() == 0) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec)
      s = absl::UnavailableError(
          absl::StrCat("cannot create '", tmp.string(), "': ", ec.message()));
  }
  s = agree(comm, s);
  if (!s.ok()) return s;
  s = agree(comm, write_rank_file(state, tmp / rank_file(comm.rank(), comm.size())));
  if (!s.ok()) return s;
  if (options.before_commit) options.before_commit();
  comm.barrier();
  if (comm.rank() == 0) {
    s = write_synced(tmp / kState, state_json(state, step, comm.size()).dump() + "\n");
    for (const auto& [name, text] : options.extra_files) {
      if (s.ok()) s = write_synced(tmp / name, text);
    }
    if (s.ok()) s = write_synced(tmp / kComplete, absl::StrCat(step, "\n"));
    if (s.ok()) s = sync_path(tmp);
    if (s.ok()) {
      fs::remove_all(final_dir, ec);
      fs::rename(tmp, final_dir, ec);
      if (ec) {
        s = absl::UnavailableError(absl::StrCat("cannot rename '", tmp.string(), "' to '",
                                                final_dir.string(), "': ", ec.message()));
      } else {
        s = sync_path(dir);
      }
    }
    if (s.ok() && options.keep_last > 0) {
      std::vector<std::pair<int64_t, fs::path>> steps = complete_steps(dir, /*warn=*/false);
      for (size_t i = 0; i + options.keep_last < steps.size(); ++i) {
        fs::remove_all(steps[i].second, ec);
      }
    }
  }
  return agree(comm, s);
}

absl::StatusOr<std::string> latest_checkpoint(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> steps = complete_steps(dir, /*warn=*/true);
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat("no complete checkpoint under '", dir, "'"));
  }
  return steps.back().second.string();
}

absl::StatusOr<std::string> read_checkpoint_file(const std::string& step_dir,
                                                 const std::string& name) {
  std::error_code ec;
  const fs::path path = fs::path(step_dir) / name;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", step_dir, " has no ", name));
  }
  core::ReadFileOptions options;
  options.max_bytes = int64_t{64} << 30;  // e.g. a controller snapshot with its buffered groups
  return core::read_file(path.string(), options);
}

absl::Status load_checkpoint(Learner& learner, const std::string& step_dir) {
  absl::StatusOr<std::map<std::string, double>> scalars =
      load_checkpoint(state_of(learner), learner.policy().comm(), step_dir);
  if (!scalars.ok()) return scalars.status();
  for (const char* name : {"version", "kl_beta", "consecutive_skips"}) {
    if (!scalars->count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_dir, ": not a learner checkpoint (no ", name, ")"));
    }
  }
  learner.set_version(static_cast<int64_t>(scalars->at("version")));
  learner.set_kl_beta(scalars->at("kl_beta"));
  learner.set_consecutive_skips(static_cast<int64_t>(scalars->at("consecutive_skips")));
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> load_checkpoint(const TrainingState& state,
                                                              comm::Communicator& comm,
                                                              const std::string& step_dir) {
  std::map<std::string, double> scalars;
  auto load = [&]() -> absl::Status {
    std::error_code ec;
    if (!fs::exists(fs::path(step_dir) / kComplete, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", step_dir, " is incomplete (no ", kComplete, " marker)"));
    }
    const std::string state_path = (fs::path(step_dir) / kState).string();
    absl::StatusOr<Json> saved = core::read_json_file(state_path);
    if (!saved.ok()) return saved.status();
    const Json* format = saved->find("format");
    if (format == nullptr || !format->is_string() || format->as_string() != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(state_path, ": not a ", kFormat, " file"));
    }
    const Json* world = saved->find("world_size");
    if (world == nullptr || !world->is_integer() || world->as_int() != comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          state_path, ": saved by ", world && world->is_integer() ? world->as_int() : -1,
          " learner rank(s), loading on ", comm.size(), "; resume with the same number of ranks"));
    }
    const Json* saved_scalars = saved->find("scalars");
    if (saved_scalars == nullptr || !saved_scalars->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(state_path, ": no scalars"));
    }
    for (const auto& [name, value] : saved_scalars->as_object()) {
      if (!value.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(state_path, ": scalar ", name));
      }
      scalars[name] = value.as_double();
    }
    const std::string file = (fs::path(step_dir) / rank_file(comm.rank(), comm.size())).string();
    FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::SafetensorsFile> shards,
                              model::SafetensorsFile::open(file));
    auto tensor = [&](const std::string& name,
                      const at::Tensor& like) -> absl::StatusOr<at::Tensor> {
      absl::StatusOr<at::Tensor> t = shards->tensor(name);
      if (!t.ok()) return absl::NotFoundError(absl::StrCat(file, ": no tensor '", name, "'"));
      if (t->scalar_type() != at::kFloat || t->sizes() != like.sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": tensor '", name, "' is ", c10::toString(t->scalar_type()), " of ",
                         t->numel(), " elements; this learner needs float32 of ", like.numel()));
      }
      return t;
    };
    at::NoGradGuard no_grad;
    for (auto& [prefix, model] : state.models) {
      for (FlatUnit* unit : model->trainable_units()) {
        FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor t, tensor(prefix + "/" + unit->name(), unit->shard()));
        unit->shard().detach().copy_(t);
      }
    }
    const Json* steps = saved->find("optimizer_steps");
    for (auto& [prefix, optimizer] : state.optimizers) {
      std::map<std::string, at::Tensor> moments;
      for (const auto& [name, like] : optimizer->state()) {
        FLYWHEEL_ASSIGN_OR_RETURN(at::Tensor t, tensor(prefix + "_optimizer/" + name, like));
        moments[name] = t;
      }
      const Json* n = steps != nullptr ? steps->find(prefix) : nullptr;
      if (n == nullptr || !n->is_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat(state_path, ": no optimizer step count for ", prefix));
      }
      FLYWHEEL_RETURN_IF_ERROR(optimizer->load_state(moments, n->as_int()));
    }
    return absl::OkStatus();
  };
  FLYWHEEL_RETURN_IF_ERROR(agree(comm, load()));
  return scalars;
}

namespace {

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

}  // namespace

namespace {

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
    FLYWHEEL_ASSIGN_OR_RETURN(LoraTraining training, lora_from_json(*lora, state_path));
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

absl::Status copy_side_files(const std::string& step_dir, const std::string& out_dir) {
  std::error_code ec;
  FLYWHEEL_ASSIGN_OR_RETURN(std::vector<std::string> side, model::hf_side_files(step_dir));
  for (const std::string& file : side) {
    fs::copy_file(file, fs::path(out_dir) / fs::path(file).filename(),
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot copy ", file, ": ", ec.message()));
  }
  return absl::OkStatus();
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
  return copy_side_files(step_dir, out_dir);
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
  return copy_side_files(step_dir, out_dir);
}

TrainingState policy_training_state(ShardedDecoder& model, ShardedAdamW& optimizer,
                                    const UpdateCounters& counters, const std::string& name) {
  TrainingState state;
  state.models = {{name, &model}};
  state.optimizers = {{name, &optimizer}};
  counters.save(&state.scalars);
  return state;
}

}  // namespace flywheel::trainer
