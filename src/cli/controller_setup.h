// The controller's pieces as a config describes them: the prompt dataset, the core's options
// and group filter, the gRPC server's options (token, TLS), and the matching client options for
// rollout workers. Shared by `flywheel buffer`, `flywheel learner` and `flywheel rollout`.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/controller_client.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/buffer/controller_server.h"
#include "flywheel/buffer/prompt_dataset.h"
#include "job_setup.h"

namespace flywheel::cli {

struct ControllerSetup {
  std::unique_ptr<buffer::PromptDataset> dataset;
  buffer::ControllerOptions options;
  buffer::ControllerCore::Filter filter;
  buffer::ControllerServerOptions server;
};

// Loads data.train_path and builds the options from the config; token ids must be below
// `vocab_size`. `who` prefixes the warning printed when no token is configured.
absl::StatusOr<ControllerSetup> prepare_controller(const JobSetup& job, int64_t vocab_size,
                                                   const std::string& who);

// The core: restored from `snapshot` when it is not empty, else fresh.
absl::StatusOr<std::unique_ptr<buffer::ControllerCore>> make_controller_core(
    const ControllerSetup& setup, const std::string& snapshot);

// A rollout worker's client options: the token (the same file or environment variable as the
// server's) and, with buffer.server.tls_cert set, TLS trusting that certificate.
absl::StatusOr<buffer::ControllerClientOptions> controller_client_options(
    const core::Config& config, const std::string& address, const std::string& worker_id);

}  // namespace flywheel::cli
