// `flywheel version`: versions of flywheel and its runtime dependencies, CUDA/NCCL availability.
#include <mpi.h>

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/core/build_info.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"
#include "torch/cuda.h"
#include "torch/version.h"
#include "yaml-cpp/yaml.h"

namespace flywheel::cli {
namespace {

std::string mpi_library_version() {
  char buffer[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  // Allowed before MPI_Init (MPI-3 §8.1.1).
  if (MPI_Get_library_version(buffer, &length) != MPI_SUCCESS) return "unknown";
  std::string version(buffer, length);
  size_t cut = version.find_first_of(",\n");
  return cut == std::string::npos ? version : version.substr(0, cut);
}

int run_version() {
  std::cout << "flywheel " << FLYWHEEL_VERSION_STRING << " (" << FLYWHEEL_GIT_REVISION << ", "
            << FLYWHEEL_BUILD_TYPE << ", " << FLYWHEEL_CXX_COMPILER << ")\n";
  std::cout << "LibTorch " << TORCH_VERSION << "\n";
  std::cout << "gRPC " << grpc::Version() << "\n";
  std::cout << "Protobuf " << google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION)
            << "\n";
  std::cout << "MPI " << mpi_library_version() << "\n";
  bool cuda_runtime = torch::cuda::is_available();
  std::cout << "CUDA: "
            << (FLYWHEEL_BUILT_WITH_CUDA ? "code paths built (toolkit " FLYWHEEL_CUDA_VERSION ")"
                                         : "code paths not built")
            << "; LibTorch CUDA runtime "
            << (cuda_runtime
                    ? "available (" + std::to_string(torch::cuda::device_count()) + " device(s))"
                    : std::string("not available"))
            << "\n";
  std::cout << "NCCL: "
            << (FLYWHEEL_BUILT_WITH_NCCL ? "code paths built (NCCL " FLYWHEEL_NCCL_VERSION ")"
                                         : "code paths not built")
            << "\n";
  return kExitOk;
}

}  // namespace

void add_version_command(CLI::App& app, int* exit_code) {
  CLI::App* command = app.add_subcommand(
      "version",
      "Print versions of flywheel, LibTorch, gRPC, Protobuf and MPI, and whether "
      "CUDA and NCCL are available");
  command->callback([exit_code] { *exit_code = run_version(); });
}

}  // namespace flywheel::cli
