// `flywheel init-model --config config.json --out DIR`: a randomly initialised model directory
// (Hugging Face's initialisation, deterministic per seed) for tests and toy tasks.
// `flywheel init-model --from DIR --add-layers N --out DIR2`: DIR's model with N layers appended,
// the identity until trained (model/grow_model.h).
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/grow_model.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

struct InitArgs {
  std::string config;
  std::string from_dir;
  int64_t add_layers = 0;
  std::string out_dir;
  uint64_t seed = 1;
  std::string dtype;  // --config: float32; --from: the directory's torch_dtype
  bool char_tokenizer = false;
};

absl::Status grow(const InitArgs& args) {
  if (args.add_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--add-layers must be >= 1 with --from, got ", args.add_layers));
  }
  if (args.char_tokenizer) {
    return absl::InvalidArgumentError(
        "--char-tokenizer is for --config: --from copies the tokenizer files of its directory");
  }
  absl::StatusOr<model::ModelConfig> config =
      model::ModelConfig::from_file(args.from_dir + "/config.json");
  if (!config.ok()) return config.status();
  FLYWHEEL_ASSIGN_OR_RETURN(
      at::ScalarType dtype,
      model::parse_dtype(args.dtype.empty() ? config->torch_dtype : args.dtype));
  model::ModelConfig grown_config = *config;
  grown_config.num_hidden_layers += args.add_layers;
  FLYWHEEL_RETURN_IF_ERROR(check_model_memory(grown_config, dtype, args.from_dir));
  int64_t parameters = 0;
  try {
    absl::StatusOr<std::unique_ptr<model::DecoderModel>> base =
        model::load_hf_model(args.from_dir, cpu_decoder(dtype));
    if (!base.ok()) return base.status();
    absl::StatusOr<std::unique_ptr<model::DecoderModel>> grown =
        model::grow_model(**base, model::GrowOptions{args.add_layers, args.seed});
    if (!grown.ok()) return grown.status();
    FLYWHEEL_RETURN_IF_ERROR(model::save_hf_model(**grown, args.out_dir));
    parameters = (*grown)->config().num_parameters();
  } catch (const std::exception& e) {
    return model_exception_error(grown_config, args.from_dir, e);
  }
  FLYWHEEL_ASSIGN_OR_RETURN(const int copied,
                            model::copy_hf_side_files(args.from_dir, args.out_dir));
  std::cout << "grew " << config->model_type << " from " << config->num_hidden_layers << " to "
            << grown_config.num_hidden_layers << " layers (" << parameters
            << " parameters; appended layers the identity until trained, seed " << args.seed
            << ") in " << args.out_dir << ", with " << copied << " tokenizer file(s)\n";
  return absl::OkStatus();
}

absl::Status run(const InitArgs& args) {
  if (!args.from_dir.empty()) return grow(args);
  absl::StatusOr<model::ModelConfig> config = model::ModelConfig::from_file(args.config);
  if (!config.ok()) return config.status();
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype,
                            model::parse_dtype(args.dtype.empty() ? "float32" : args.dtype));
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
        model::DecoderModel::create(*config, cpu_decoder(dtype));
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
                         "config.json (for tests and toy tasks), or a model directory with layers "
                         "appended (--from, --add-layers)");
  CLI::Option* config = command->add_option("--config", args->config, "Hugging Face config.json");
  CLI::Option* from =
      command->add_option("--from", args->from_dir,
                          "Model directory to grow: its weights, with --add-layers layers "
                          "appended that leave its outputs unchanged until trained");
  config->excludes(from);
  from->excludes(config);
  command
      ->add_option("--add-layers", args->add_layers,
                   "With --from: decoder layers to append (>= 1), each the identity at "
                   "initialisation (zero output projections)")
      ->needs(from);
  command->add_option("--out", args->out_dir, "Output directory")->required();
  command->add_option("--seed", args->seed,
                      "Initialisation seed (of the appended layers with --from)");
  command
      ->add_option(
          "--dtype", args->dtype,
          "Parameter dtype: float32 or bfloat16 (default: float32; with --from, the directory's "
          "torch_dtype)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  command->add_flag("--char-tokenizer", args->char_tokenizer,
                    "Also write char_tokenizer.json (the default character tokenizer, 100 ids)");
  command->callback([args, exit_code] {
    absl::Status status = args->config.empty() && args->from_dir.empty()
                              ? absl::InvalidArgumentError("one of --config or --from is required")
                              : run(*args);
    if (!status.ok()) std::cerr << "flywheel init-model: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
