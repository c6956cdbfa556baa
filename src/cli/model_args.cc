#include "model_args.h"

#include <unistd.h>

#include <exception>
#include <filesystem>

#include <c10/util/Exception.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/cpu_allocator.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/peft_adapter.h"
#include "flywheel/model/torch_error.h"

namespace flywheel::cli {
namespace {

std::string sizes(const model::ModelConfig& c) {
  return absl::StrCat("vocab_size ", c.vocab_size, ", hidden_size ", c.hidden_size,
                      ", intermediate_size ", c.intermediate_size, ", num_hidden_layers ",
                      c.num_hidden_layers);
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

void ModelArgs::add_to(CLI::App* command, const std::string& dir_flag) {
  if (!dir_flag.empty()) {
    command->add_option(dir_flag, dir, "Hugging Face model directory")->required();
  }
  command
      ->add_option("--dtype", dtype,
                   "Compute dtype: float32, bfloat16, float16 (GPU) or auto (bfloat16 on a CPU "
                   "with native bf16, float32 otherwise)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16", "auto"}));
  command
      ->add_option("--threads", threads,
                   "Thread budget, LibTorch intra-op + BLAS (0 = OMP_NUM_THREADS if set, else "
                   "the cores)")
      ->check(CLI::Range(0, 1024));
  command
      ->add_option("--thread-split", thread_split,
                   "Split of --threads: auto (by dtype and CPU), kernels (flywheel's kernels "
                   "all, LibTorch 1, BLAS 1), blas (LibTorch 1, BLAS all: float32 GEMMs) or aten "
                   "(LibTorch all, BLAS 1)")
      ->check(CLI::IsMember({"auto", "kernels", "blas", "aten"}));
}

absl::StatusOr<std::unique_ptr<model::DecoderModel>> ModelArgs::load(
    model::ThreadLayout* layout) const {
  FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType type, model::resolve_dtype(dtype, /*on_cuda=*/false));
  model::ThreadLayoutOptions layout_options;
  layout_options.threads = threads;
  layout_options.dtype = type;
  if (!model::parse_thread_split(thread_split, &layout_options.split)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown --thread-split ", thread_split));
  }
  const model::ThreadLayout applied = model::apply_thread_layout(layout_options);
  model::keep_freed_cpu_memory_for_reuse();
  if (layout != nullptr) *layout = applied;
  const std::string config_path =
      (std::filesystem::path(model::model_config_dir(dir)) / "config.json").string();
  FLYWHEEL_ASSIGN_OR_RETURN(model::ModelConfig config, model::ModelConfig::from_file(config_path));
  FLYWHEEL_RETURN_IF_ERROR(check_model_memory(config, type, config_path));
  try {
    return model::load_hf_model(dir, cpu_decoder(type, applied.threads));
  } catch (const std::exception& e) {
    return model_exception_error(config, config_path, e);
  }
}

model::DecoderOptions cpu_decoder(at::ScalarType dtype, int threads) {
  model::DecoderOptions options;
  options.dtype = dtype;
  options.device = at::kCPU;
  options.threads = threads;
  return options;
}

absl::Status check_model_memory(const model::ModelConfig& config, at::ScalarType dtype,
                                const std::string& source) {
  const double bytes =
      static_cast<double>(config.num_parameters()) * static_cast<double>(c10::elementSize(dtype));
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return absl::OkStatus();  // unknown: let allocation decide
  const double memory = static_cast<double>(pages) * static_cast<double>(page_size);
  if (bytes <= memory) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: the model needs %.1f GiB for its %d parameters in %s (%s), more than this machine's "
      "%.1f GiB of memory",
      source, bytes / kGiB, config.num_parameters(), model::dtype_name(dtype), sizes(config),
      memory / kGiB));
}

absl::Status model_exception_error(const model::ModelConfig& config, const std::string& source,
                                   const std::exception& e) {
  const std::string what = model::exception_message(e);
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": out of memory allocating the model's ", config.num_parameters(),
                     " parameters (", sizes(config), ")"));
  }
  return absl::InternalError(
      absl::StrCat(source, ": the model (", sizes(config), ") failed: ", what));
}

}  // namespace flywheel::cli
