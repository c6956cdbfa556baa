#include "flywheel/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint_files.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::trainer {

std::string checkpoint_files::rank_file(int rank, int world) {
  return absl::StrFormat("rank-%05d-of-%05d.safetensors", rank, world);
}

// A LoRA model's adapters in trainer_state.json: enough to export them without the config.
core::Json checkpoint_files::lora_json(const LoraTraining& lora) {
  core::Json j = core::Json::object();
  j.set("rank", core::Json(lora.adapters.rank));
  j.set("alpha", core::Json(lora.adapters.alpha));
  j.set("dropout", core::Json(lora.dropout));
  core::Json targets = core::Json::array();
  for (const std::string& t : lora.adapters.targets) targets.push_back(core::Json(t));
  j.set("targets", std::move(targets));
  j.set("base_path", core::Json(lora.base_path));
  return j;
}

absl::StatusOr<LoraTraining> checkpoint_files::lora_from_json(const core::Json& j,
                                                              const std::string& path) {
  const core::Json* rank = j.find("rank");
  const core::Json* alpha = j.find("alpha");
  const core::Json* targets = j.find("targets");
  const core::Json* base = j.find("base_path");
  if (!rank || !rank->is_integer() || !alpha || !alpha->is_number() || !targets ||
      !targets->is_array() || !base || !base->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed 'lora' entry"));
  }
  LoraTraining lora;
  lora.adapters.rank = rank->as_int();
  lora.adapters.alpha = alpha->as_double();
  for (const core::Json& t : targets->as_array()) lora.adapters.targets.push_back(t.as_string());
  if (const core::Json* dropout = j.find("dropout")) lora.dropout = dropout->as_double();
  lora.base_path = base->as_string();
  return lora;
}

namespace {

namespace fs = std::filesystem;
using checkpoint_files::kComplete;
using checkpoint_files::kState;
using checkpoint_files::lora_json;
using checkpoint_files::rank_file;
using core::Json;

constexpr char kFormat[] = "flywheel.checkpoint.v1";

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

TrainingState policy_training_state(ShardedDecoder& model, ShardedAdamW& optimizer,
                                    const UpdateCounters& counters, const std::string& name) {
  TrainingState state;
  state.models = {{name, &model}};
  state.optimizers = {{name, &optimizer}};
  counters.save(&state.scalars);
  return state;
}

}  // namespace flywheel::trainer
