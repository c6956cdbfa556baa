// Collective communication between the learner ranks (DESIGN.md §6): one interface, two
// backends. MpiCommunicator moves CPU tensors over MPI; NcclCommunicator moves CUDA tensors over
// NCCL (built when CUDA and NCCL are found).
//
// Every call is collective: all ranks of the group make the same calls in the same order, with
// tensors of the same shape and dtype. Tensors must be contiguous and on the backend's device;
// breaking that is a bug in the caller and fails a check (c10::Error).
//
// Deadlines: a collective that has not completed after `timeout_s` logs which collective, the
// rank, the group and the elapsed time, and ends the job with exit code kTimeoutExitCode
// (MPI_Abort / ncclCommAbort): a rank that stops responding never hangs the others.
//
// Thread safety: a communicator is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "absl/status/statusor.h"

namespace flywheel::comm {

constexpr int kTimeoutExitCode = 3;

enum class ReduceOp { kSum, kMax, kMin };

struct CommunicatorOptions {
  std::string name = "world";  // names the group in timeout messages
  double timeout_s = 300;      // per collective (> 0)
  // Where each rank records its collectives (progress_board.h), on a filesystem every rank
  // sees, so that a timeout names the ranks that never arrived; "" = no records. Groups split
  // from this one share it.
  std::string progress_dir;
  // NCCL: collectives on a CUDA stream of their own, ordered after what the default stream
  // holds when each is issued, instead of on the legacy default stream (a rollout worker's
  // weight receive then runs beside the engine's kernels, not between them).
  bool own_stream = false;
};

// A collective started by an *_async call. wait() blocks until it completed (under the
// communicator's deadline); the tensors it was given must stay alive and untouched until then.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const CommunicatorOptions& options() const = 0;
  // "mpi" or "nccl".
  virtual const char* backend() const = 0;
  // Where the backend's tensors live: the CPU for MPI, the CUDA device for NCCL.
  virtual at::Device device() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`. Floating-point sums of
  // bfloat16 / float16 tensors are computed in float32.
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // full = the ranks' `shard`s concatenated in rank order; full.numel() == size() x shard.numel().
  virtual void all_gather(const at::Tensor& shard, at::Tensor& full) = 0;
  virtual std::unique_ptr<Work> all_gather_async(const at::Tensor& shard, at::Tensor& full) = 0;
  // shard = rank r's slice of the reduction of every rank's `full` (size() equal slices).
  virtual void reduce_scatter(const at::Tensor& full, at::Tensor& shard,
                              ReduceOp op = ReduceOp::kSum) = 0;
  // `tensor` of rank `root` is copied into every rank's `tensor`.
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  // all_reduce / all_gather of CPU tensors whatever the backend (moved to device() and back):
  // for small bookkeeping tensors such as counts, flags and metrics.
  void all_reduce_host(at::Tensor& cpu_tensor, ReduceOp op = ReduceOp::kSum);
  void all_gather_host(const at::Tensor& cpu_shard, at::Tensor& cpu_full);
  void broadcast_host(at::Tensor& cpu_tensor, int root);

  // A communicator of the ranks that pass the same `color`, ordered by `key` (then by rank);
  // collective over this group. `name` names it in timeout messages; `timeout_s` > 0 is its
  // collectives' deadline (0: this group's).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key,
                                                              const std::string& name,
                                                              double timeout_s = 0) = 0;
};

// OK when every rank's device id (e.g. "host:PCI bus id", in rank order) is distinct; else
// FailedPrecondition naming the ranks that share one, for group `name` (NCCL refuses two ranks
// of one communicator on one GPU, with an opaque error).
absl::Status check_distinct_devices(const std::vector<std::string>& device_ids,
                                    const std::string& name);

// `value` as rank 0 holds it, on every rank: its size, then its bytes in broadcasts of at most
// `chunk_bytes` (a message count stays far below MPI's 2^31 limit whatever the size).
// Collective.
std::string broadcast_string(Communicator& comm, const std::string& value,
                             int64_t chunk_bytes = int64_t{1} << 30);

// This process's host name (gethostname), for messages that name where something happened.
std::string host_name();

}  // namespace flywheel::comm
