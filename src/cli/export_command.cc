// `flywheel export CKPT OUT_DIR`: writes a Hugging Face directory (config.json, safetensors,
// tokenizer files) that transformers, vLLM and llama.cpp's converters read.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/model/hf_checkpoint.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

// Files copied next to the weights when the source has them.
constexpr const char* kSideFiles[] = {"tokenizer.json",
                                      "tokenizer_config.json",
                                      "special_tokens_map.json",
                                      "generation_config.json",
                                      "vocab.json",
                                      "merges.txt",
                                      "char_tokenizer.json"};

struct ExportArgs {
  ModelArgs model;
  std::string out_dir;
  double shard_gib = 5.0;
};

absl::Status run(const ExportArgs& args) {
  std::error_code ec;
  if (fs::exists(args.out_dir, ec) && fs::equivalent(args.model.dir, args.out_dir, ec)) {
    return absl::InvalidArgumentError("OUT_DIR must differ from CKPT");
  }
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> model = args.model.load();
  if (!model.ok()) return model.status();
  model::SaveOptions options;
  options.max_shard_bytes = static_cast<int64_t>(args.shard_gib * (int64_t{1} << 30));
  absl::Status saved = model::save_hf_model(**model, args.out_dir, options);
  if (!saved.ok()) return saved;
  int copied = 0;
  for (const char* name : kSideFiles) {
    fs::path from = fs::path(args.model.dir) / name;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, fs::path(args.out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("cannot copy ", from.string(), ": ", ec.message()));
    ++copied;
  }
  std::cout << "exported " << (*model)->config().num_parameters() << " parameters ("
            << args.model.dtype << ") and " << copied << " tokenizer/config file(s) to "
            << args.out_dir << "\n";
  return absl::OkStatus();
}

}  // namespace

void add_export_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a Hugging Face model directory (config.json, model*.safetensors and the "
      "tokenizer files) from a model directory, optionally converting its dtype");
  command->add_option("ckpt", args->model.dir, "Source model directory (Hugging Face format)")
      ->required();
  command->add_option("out_dir", args->out_dir, "Output directory")->required();
  args->model.add_to(command, /*dir_flag=*/"");
  command->add_option("--shard-gib", args->shard_gib, "Largest safetensors shard, in GiB")
      ->check(CLI::PositiveNumber);
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel export: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
