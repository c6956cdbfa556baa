// Model-loading options shared by the model subcommands (score, export, ...).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/options/cluster_options.h"
#include "flywheel/model/cpu/thread_layout.h"
#include "flywheel/model/decoder.h"

namespace CLI {
class App;
}  // namespace CLI

namespace flywheel::cli {

struct ModelArgs {
  std::string dir;
  std::string dtype = "float32";      // or "auto" (model::resolve_dtype)
  int threads = 0;                    // budget; 0 = OMP_NUM_THREADS if set, else the cores
  std::string thread_split = "auto";  // model::ThreadSplit name

  // Adds --model (required unless `dir_flag` is empty), --dtype, --threads and --thread-split to
  // `command`.
  void add_to(CLI::App* command, const std::string& dir_flag = "--model");
  // Resolves the dtype, applies the thread layout (into `*layout` when given, for the caller to
  // print), then loads `dir` (an HF directory) on the CPU. Errors name the file and field: the
  // config's and the checkpoint's, a model too large for this machine (check_model_memory), and
  // an allocation failure or LibTorch error while loading.
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> load(
      model::ThreadLayout* layout = nullptr) const;
};

// A CPU model in `dtype` whose kernels run `threads` threads (0: ATen's), without adapters.
model::DecoderOptions cpu_decoder(at::ScalarType dtype, int threads = 0);

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
