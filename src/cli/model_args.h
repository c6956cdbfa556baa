// Model-loading options shared by the model subcommands (score, export, ...).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"

namespace CLI {
class App;
}  // namespace CLI

namespace flywheel::cli {

struct ModelArgs {
  std::string dir;
  std::string dtype = "float32";
  int threads = 0;  // 0 = LibTorch's default

  // Adds --model (required unless `dir_flag` is empty), --dtype and --threads to `command`.
  void add_to(CLI::App* command, const std::string& dir_flag = "--model");
  // Sets the thread count, then loads `dir` (an HF directory) on the CPU. Errors name the file
  // and field: the config's and the checkpoint's, a model too large for this machine
  // (check_model_memory), and an allocation failure or LibTorch error while loading.
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> load() const;
};

// ResourceExhausted naming `source` and the config's sizes when the parameters of `config` in
// `dtype` need more than this machine's physical memory: allocating them would get the process
// killed (memory is overcommitted) instead of failing.
absl::Status check_model_memory(const model::ModelConfig& config, at::ScalarType dtype,
                                const std::string& source);

// The error for an exception (std::bad_alloc, c10::Error, ...) thrown while creating, loading or
// saving the model of `config`: names `source`, the sizes and the exception's message.
absl::Status model_exception_error(const model::ModelConfig& config, const std::string& source,
                                   const std::exception& e);

}  // namespace flywheel::cli
