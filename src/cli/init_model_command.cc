// `flywheel init-model --config config.json --out DIR`: a randomly initialised model directory
// (Hugging Face's initialisation, deterministic per seed) for tests and toy tasks.
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

struct InitArgs {
  std::string config;
  std::string out_dir;
  uint64_t seed = 1;
  std::string dtype = "float32";
  bool char_tokenizer = false;
};

absl::Status run(const InitArgs& args) {
  absl::StatusOr<model::ModelConfig> config = model::ModelConfig::from_file(args.config);
  if (!config.ok()) return config.status();
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype, model::parse_dtype(args.dtype));
  if (args.char_tokenizer) {
    absl::StatusOr<std::unique_ptr<model::Tokenizer>> t =
        model::load_tokenizer("", "char");  // no char_tokenizer.json: the default alphabet
    if (!t.ok()) return t.status();
    if ((*t)->vocab_size() > config->vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("the character tokenizer needs vocab_size >= ", (*t)->vocab_size(),
                       ", the config has ", config->vocab_size));
    }
  }
  FLYWHEEL_RETURN_IF_ERROR(check_model_memory(*config, dtype, args.config));
  try {
    absl::StatusOr<std::unique_ptr<model::DecoderModel>> model =
        model::DecoderModel::create(*config, model::DecoderOptions{dtype, at::kCPU});
    if (!model.ok()) return model.status();
    (*model)->init_random(args.seed);
    FLYWHEEL_RETURN_IF_ERROR(model::save_hf_model(**model, args.out_dir));
  } catch (const std::exception& e) {
    return model_exception_error(*config, args.config, e);
  }
  if (args.char_tokenizer) {
    FLYWHEEL_RETURN_IF_ERROR(model::save_default_char_tokenizer(args.out_dir));
  }
  std::cout << "initialised " << config->model_type << " with " << config->num_parameters()
            << " parameters (seed " << args.seed << ") in " << args.out_dir << "\n";
  return absl::OkStatus();
}

}  // namespace

void add_init_model_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InitArgs>();
  CLI::App* command =
      app.add_subcommand("init-model",
                         "Write a randomly initialised Hugging Face model directory from a "
                         "config.json (for tests and toy tasks)");
  command->add_option("--config", args->config, "Hugging Face config.json")->required();
  command->add_option("--out", args->out_dir, "Output directory")->required();
  command->add_option("--seed", args->seed, "Initialisation seed");
  command->add_option("--dtype", args->dtype, "Parameter dtype: float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  command->add_flag("--char-tokenizer", args->char_tokenizer,
                    "Also write char_tokenizer.json (the default character tokenizer, 100 ids)");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel init-model: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
