// NCCL backend of Communicator: CUDA tensors over NCCL. Built when CUDA and NCCL are found
// (FLYWHEEL_WITH_NCCL); create() says "not built" otherwise.
//
// The group is bootstrapped over another communicator (MPI, or the controller's channel): rank
// 0 makes the NCCL unique id and broadcasts it; before that every rank's "host:PCI bus id" is
// all-gathered and two ranks on one GPU are refused (FailedPrecondition naming them).
// Collectives run on the CUDA legacy default stream, so they are ordered with LibTorch's
// default-stream kernels before and after them (or, with options.own_stream, on a stream of
// their own that waits for what the default stream holds when each is issued), and each call
// returns once its collective completed. A collective past the deadline is reported
// as in communicator.h, then the NCCL communicator is aborted (ncclCommAbort) and the process
// exits with kTimeoutExitCode.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"

namespace flywheel::comm {

class ProgressBoard;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`: one NCCL rank per bootstrap rank, on CUDA device `device`.
  // Unimplemented when flywheel was built without NCCL; Unavailable for NCCL or CUDA errors.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> create(Communicator& bootstrap,
                                                                  int device,
                                                                  const CommunicatorOptions& o);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CommunicatorOptions& options() const override { return options_; }
  const char* backend() const override { return "nccl"; }
  at::Device device() const override { return at::Device(at::kCUDA, device_); }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void all_gather(const at::Tensor& shard, at::Tensor& full) override;
  std::unique_ptr<Work> all_gather_async(const at::Tensor& shard, at::Tensor& full) override;
  void reduce_scatter(const at::Tensor& full, at::Tensor& shard, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name,
                                                      double timeout_s = 0) override;

 private:
  struct Handle;  // ncclComm_t
  NcclCommunicator(std::unique_ptr<Handle> handle, int device, const CommunicatorOptions& o);
  // Waits for the collectives issued so far; past the deadline, reports and aborts.
  void wait(const char* what);

  std::unique_ptr<Handle> handle_;
  int device_ = 0;
  CommunicatorOptions options_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<ProgressBoard> board_;  // null without options_.progress_dir
  uint64_t seq_ = 0;                      // collectives waited for so far
};

}  // namespace flywheel::comm
