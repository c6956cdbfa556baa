// The controller's pieces as a config describes them: the prompt dataset, the core's options
// and group filter, the gRPC server's options (token, TLS), and the matching client options for
// rollout workers. Shared by `flywheel buffer`, `flywheel learner` and `flywheel rollout`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/buffer/prompt_dataset.h"
#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/model/model_config.h"

namespace flywheel::jobs {

struct ControllerSetup {
  std::unique_ptr<buffer::PromptDataset> dataset;
  buffer::ControllerOptions options;
  buffer::ControllerCore::Filter filter;
  buffer::ControllerServerOptions server;
};

// Loads data.train_path and builds the options from the config; token ids must be below
// `model`'s vocab_size, and a mixture of experts' routes fit its shape. `who` prefixes the warning
// printed when no token is configured.
absl::StatusOr<ControllerSetup> prepare_controller(const JobSetup& job,
                                                   const model::ModelConfig& model,
                                                   const std::string& who);

// The core: restored from `snapshot` when it is not empty, else fresh.
absl::StatusOr<std::unique_ptr<buffer::ControllerCore>> make_controller_core(
    const ControllerSetup& setup, const std::string& snapshot);

// A rollout worker's client options: the token (the same file or environment variable as the
// server's) and, with buffer.server.tls_cert set, TLS trusting that certificate.
absl::StatusOr<buffer::ControllerClientOptions> controller_client_options(
    const core::Config& config, const std::string& address, const std::string& worker_id);

// What learner rank 0 owns besides its learner shard: the controller and the published weights.
struct ControllerHost {
  ControllerSetup setup;
  std::unique_ptr<buffer::ControllerCore> core;
  std::unique_ptr<buffer::WeightStore> weights;  // deltas as weight_sync says
  std::unique_ptr<buffer::ControllerServer> server;
  std::string address;  // what workers dial (a wildcard bind address becomes the host's name)

  // After the learners' step `step` was published: grants may now be made at it; the buffer's
  // counters and the weight acknowledgements go to `log`.
  void stepped(int64_t step,
               const std::function<void(const std::string&, double, int64_t)>& log) const;
  // "" or, when prompts were dropped or groups rejected as invalid (a worker of another
  // version, a reward that fails on every record, ...), a note saying how many.
  std::string lost_summary() const;
};

// Rank 0's controller at `version`: restored from `snapshot` when resuming (its leases are
// re-issued), serving from now on. `weights_dtype` is the rollout dtype the manifest announces.
absl::StatusOr<std::unique_ptr<ControllerHost>> start_controller(const JobSetup& job,
                                                                 const model::ModelConfig& model,
                                                                 at::ScalarType weights_dtype,
                                                                 int64_t version,
                                                                 const std::string& snapshot);

}  // namespace flywheel::jobs
