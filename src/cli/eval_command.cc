// `flywheel eval MODEL_OR_CHECKPOINT --config CONFIG [--data FILE]`: the held-out evaluation
// `flywheel train` runs (greedy completions, exact match against each record's answer), on a
// Hugging Face directory or a learner checkpoint's step directory. Under mpirun the records are
// shared among the ranks. Prints one JSON line: accuracy, mean completion length, records.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/comm/mpmd.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/eval/held_out_eval.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/model/device_choice.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/learner_job.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string model;
  std::string config_path;
  std::string data;
  std::vector<std::string> overrides;
};

// A step directory of `flywheel train` / `flywheel sft` is exported to a temporary Hugging Face
// directory first (removed on exit).
class ModelDir {
 public:
  static absl::StatusOr<ModelDir> open(const std::string& path, at::ScalarType dtype,
                                       comm::Communicator& comm) {
    ModelDir dir;
    std::error_code ec;
    if (!fs::exists(fs::path(path) / "trainer_state.json", ec)) {
      dir.path_ = path;
      return dir;
    }
    std::string tmp;
    if (comm.rank() == 0) {
      std::string pattern = (fs::temp_directory_path() / "flywheel-eval-XXXXXX").string();
      if (mkdtemp(pattern.data()) == nullptr) {
        return absl::UnavailableError("cannot create a temporary directory");
      }
      tmp = pattern;
      absl::Status s = trainer::export_checkpoint(path, "policy", tmp, dtype);
      if (!s.ok()) {
        fs::remove_all(tmp, ec);
        return s;
      }
    }
    dir.path_ = comm::broadcast_string(comm, tmp);
    dir.owned_ = comm.rank() == 0;
    return dir;
  }
  ModelDir() = default;
  ModelDir(ModelDir&& other) noexcept : path_(std::move(other.path_)), owned_(other.owned_) {
    other.owned_ = false;
  }
  ~ModelDir() {
    std::error_code ec;
    if (owned_) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

absl::Status run(const EvalArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config_path, overrides));
  core::Config c = job.loaded.config;
  absl::StatusOr<std::unique_ptr<comm::MpiRuntime>> mpi = comm::MpiRuntime::init(nullptr, nullptr);
  if (!mpi.ok()) return mpi.status();
  auto world = comm::MpiCommunicator::world(**mpi, comm::collective_options("eval", c));
  if (!world.ok()) return world.status();
  const at::ScalarType dtype =
      model::resolve_dtype(c.model.dtype, model::uses_cuda(c.model.device));
  FLYWHEEL_ASSIGN_OR_RETURN(ModelDir dir, ModelDir::open(args.model, dtype, **world));
  c.model.path = dir.path();  // the tokenizer too, unless tokenizer.path names one
  const std::string data = args.data.empty() ? c.data.eval_path : args.data;
  if (data.empty()) return absl::InvalidArgumentError("--data FILE (or data.eval_path) is needed");

  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(dir.path()) / "config.json").string()));
  FLYWHEEL_ASSIGN_OR_RETURN(model::TokenizerSetup tokenizers,
                            model::load_tokenizer_setup(c.tokenizer, c.model.path));
  eval::HeldOutEvaluation evaluation;
  FLYWHEEL_RETURN_IF_ERROR(
      evaluation.set_up(c, *job.registry, job.config_dir(), model_config, tokenizers, data));
  FLYWHEEL_ASSIGN_OR_RETURN(model::DecoderModel::TensorLookup weights,
                            model::open_hf_weights(dir.path()));
  FLYWHEEL_RETURN_IF_ERROR(evaluation.evaluator->load(weights));
  FLYWHEEL_ASSIGN_OR_RETURN(eval::HeldOutEvalResult result, evaluation.evaluator->evaluate_loaded(
                                                                evaluation.data.records, **world));
  if ((*world)->rank() == 0) {
    core::Json out = core::Json::object();
    out.set("model", args.model);
    out.set("data", data);
    out.set("records", result.records);
    out.set("judge", evaluation.scorer != nullptr ? "rewards" : "answer");
    // The names train logs, without "eval/".
    eval::log_eval_result(result, [&](const std::string& name, double value) {
      out.set(name.substr(5), std::isnan(value) ? core::Json() : core::Json(value));
    });
    std::cout << out.dump() << std::endl;
  }
  return absl::OkStatus();
}

}  // namespace

void add_eval_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* command = app.add_subcommand(
      "eval",
      "Held-out accuracy (greedy, and pass@k with eval.samples) of a model directory or a "
      "checkpoint step directory, judged as `flywheel train` judges it (eval.judge)");
  command->add_option("model", args->model, "Hugging Face directory or checkpoint step_N")
      ->required();
  command->add_option("--config", args->config_path, "YAML config (tokenizer, eval, data keys)")
      ->required();
  command->add_option("--data", args->data, "Held-out JSONL (default: data.eval_path)");
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel eval: " << status.message() << "\n";
    *exit_code = exit_code_for(status);
  });
}

}  // namespace flywheel::cli
