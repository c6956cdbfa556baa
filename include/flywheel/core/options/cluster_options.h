// `cluster:` — processes, threads and collective backends.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

// cluster.thread_split (model/cpu/thread_layout.h says what each value does).
enum class ThreadSplit { kAuto, kKernels, kBlas, kAten };
absl::Span<const ChoiceName<ThreadSplit>> choice_names(ThreadSplit);

// cluster.backend.
enum class CommBackend { kAuto, kMpi, kNccl };
absl::Span<const ChoiceName<CommBackend>> choice_names(CommBackend);

struct ClusterOptions {
  int64_t num_learners = 1;         // MPI ranks started by `flywheel train`
  std::string controller_address;   // HOST:PORT rollout workers connect to; "" = local
  int64_t threads_per_process = 1;  // thread budget (ATen intra-op + BLAS) per process
  ThreadSplit thread_split = ThreadSplit::kAuto;
  CommBackend backend = CommBackend::kAuto;
  double collective_timeout_s = 300.0;
  int64_t max_worker_restarts = 20;  // `flywheel train`: restarts of each crashed rollout worker
};

void bind_options(FieldBinder& b, ClusterOptions& o);

}  // namespace flywheel::core
