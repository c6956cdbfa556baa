#include "model_args.h"

#include <ATen/Parallel.h>

#include "CLI/CLI.hpp"
#include "flywheel/model/hf_checkpoint.h"

namespace flywheel::cli {

void ModelArgs::add_to(CLI::App* command, const std::string& dir_flag) {
  if (!dir_flag.empty()) {
    command->add_option(dir_flag, dir, "Hugging Face model directory")->required();
  }
  command->add_option("--dtype", dtype, "Compute dtype: float32, bfloat16 or float16 (GPU)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  command->add_option("--threads", threads, "Intra-op threads (0 = LibTorch's default)")
      ->check(CLI::Range(0, 1024));
}

absl::StatusOr<std::unique_ptr<model::DecoderModel>> ModelArgs::load() const {
  if (threads > 0) at::set_num_threads(threads);
  absl::StatusOr<at::ScalarType> type = model::parse_dtype(dtype);
  if (!type.ok()) return type.status();
  return model::load_hf_model(dir, model::DecoderOptions{*type, at::kCPU});
}

}  // namespace flywheel::cli
