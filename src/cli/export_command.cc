// `flywheel export CKPT OUT_DIR`: writes a Hugging Face directory (config.json, safetensors,
// tokenizer files) that transformers, vLLM and llama.cpp's converters read.
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/trainer/checkpoint.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct ExportArgs {
  ModelArgs model;
  std::string out_dir;
  double shard_gib = 5.0;
  std::string which = "policy";  // of a learner checkpoint
  bool adapter = false;          // a LoRA checkpoint's adapters in PEFT's layout
};

// A learner or SFT checkpoint step directory (checkpoint.h), gathered from its rank files.
absl::Status export_checkpoint(const ExportArgs& args) {
  if (args.adapter) {
    FLYWHEEL_RETURN_IF_ERROR(trainer::export_adapter(args.model.dir, args.which, args.out_dir));
    std::cout << "exported the LoRA adapters of the " << args.which << " of checkpoint "
              << args.model.dir << " (PEFT: adapter_config.json, adapter_model.safetensors) to "
              << args.out_dir << "\n";
    return absl::OkStatus();
  }
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype,
                            model::resolve_dtype(args.model.dtype, /*on_cuda=*/false));
  model::SaveOptions save;
  save.max_shard_bytes = static_cast<int64_t>(args.shard_gib * (int64_t{1} << 30));
  absl::Status exported =
      trainer::export_checkpoint(args.model.dir, args.which, args.out_dir, dtype, save);
  if (!exported.ok()) return exported;
  std::cout << "exported the " << args.which << " of checkpoint " << args.model.dir << " ("
            << model::dtype_name(dtype) << ") to " << args.out_dir << "\n";
  return absl::OkStatus();
}

// The tokenizer that would be exported must not give ids beyond the model's vocabulary. A
// tokenizer flywheel cannot read is copied unchecked (other tools may read it).
absl::Status check_tokenizer(const std::string& dir, const model::ModelConfig& config) {
  std::error_code ec;
  const fs::path hf = fs::path(dir) / "tokenizer.json";
  const fs::path chr = fs::path(dir) / "char_tokenizer.json";
  const fs::path file = fs::exists(hf, ec) ? hf : chr;
  if (!fs::exists(file, ec)) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::load_tokenizer(dir);
  if (!tokenizer.ok()) {
    std::cerr << "flywheel export: note: " << tokenizer.status().message()
              << "; copying the tokenizer files unchecked\n";
    return absl::OkStatus();
  }
  if ((*tokenizer)->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.string(), " has ids up to ", (*tokenizer)->vocab_size() - 1,
                     ", but the model's vocab_size is ", config.vocab_size,
                     ": the tokenizer does not match the model"));
  }
  return absl::OkStatus();
}

absl::Status run(const ExportArgs& args) {
  std::error_code ec;
  if (fs::exists(args.out_dir, ec) && fs::equivalent(args.model.dir, args.out_dir, ec)) {
    return absl::InvalidArgumentError("OUT_DIR must differ from CKPT");
  }
  if (fs::exists(fs::path(args.model.dir) / "trainer_state.json", ec)) {
    return export_checkpoint(args);
  }
  if (args.adapter) {
    return absl::InvalidArgumentError(
        "--adapter exports the LoRA adapters of a checkpoint step directory (trainer.lora)");
  }
  // A side file that cannot be copied fails here, before anything is written.
  FLYWHEEL_RETURN_IF_ERROR(model::hf_side_files(args.model.dir).status());
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> model = args.model.load();
  if (!model.ok()) return model.status();
  FLYWHEEL_RETURN_IF_ERROR(check_tokenizer(args.model.dir, (*model)->config()));
  model::SaveOptions options;
  options.max_shard_bytes = static_cast<int64_t>(args.shard_gib * (int64_t{1} << 30));
  try {
    FLYWHEEL_RETURN_IF_ERROR(model::save_hf_model(**model, args.out_dir, options));
  } catch (const std::exception& e) {
    return model_exception_error((*model)->config(), args.out_dir, e);
  }
  FLYWHEEL_ASSIGN_OR_RETURN(const int copied,
                            model::copy_hf_side_files(args.model.dir, args.out_dir));
  std::cout << "exported " << (*model)->config().num_parameters() << " parameters ("
            << model::dtype_name((*model)->options().dtype) << ") and " << copied
            << " tokenizer/config file(s) to " << args.out_dir << "\n";
  return absl::OkStatus();
}

}  // namespace

void add_export_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a Hugging Face model directory (config.json, model*.safetensors and the "
      "tokenizer files) from a model directory, a PEFT LoRA adapter directory (merged into its "
      "base) or a learner / SFT checkpoint (a step_N directory; trained with trainer.lora: merged, "
      "or --adapter), optionally converting its dtype");
  command
      ->add_option("ckpt", args->model.dir,
                   "Source: a Hugging Face model directory or a checkpoint step directory")
      ->required();
  command->add_option("out_dir", args->out_dir, "Output directory")->required();
  args->model.add_to(command, /*dir_flag=*/"");
  command->add_option("--shard-gib", args->shard_gib, "Largest safetensors shard, in GiB")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--model-name", args->which,
                   "Which model of a checkpoint: policy, critic, reference, or prm (flywheel rm "
                   "--process: a token classifier)")
      ->check(CLI::IsMember({"policy", "critic", "reference", "prm"}));
  command->add_flag("--adapter", args->adapter,
                    "A checkpoint trained with trainer.lora: write its adapters as a Hugging Face "
                    "PEFT adapter (adapter_config.json naming the base directory, "
                    "adapter_model.safetensors) instead of the merged model");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel export: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
