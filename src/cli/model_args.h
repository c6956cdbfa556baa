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
  // Sets the thread count, then loads `dir` (an HF directory).
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> load() const;
};

}  // namespace flywheel::cli
