// MPI backend of Communicator: CPU tensors over the MPI C API (OpenMPI on the build machines).
//
//   auto mpi = comm::MpiRuntime::init(&argc, &argv);     // once per process, before threads
//   auto world = comm::MpiCommunicator::world(**mpi, {"learners", 300});
//   world->all_reduce(loss);
//
// Collectives are MPI's blocking calls, under a deadline a watchdog thread keeps (see
// communicator.h): past it the process reports and exits, which makes mpirun end the job.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"

namespace flywheel::comm {

class Watchdog;

// MPI for this process: MPI_Init_thread on create (unless MPI is already initialized, e.g. by a
// test harness), MPI_Finalize on destruction. Works without mpirun (a world of one rank).
class MpiRuntime {
 public:
  // Unavailable when MPI cannot be initialized.
  static absl::StatusOr<std::unique_ptr<MpiRuntime>> init(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Ends every process of the job with `exit_code` (MPI_Abort): for an error one rank meets
  // alone, which would otherwise leave the others waiting in a collective until its timeout.
  [[noreturn]] void abort(int exit_code) const;

 private:
  MpiRuntime() = default;
  bool finalize_ = false;
  int rank_ = 0, size_ = 1;
};

class MpiCommunicator final : public Communicator {
 public:
  // The world (a duplicate of MPI_COMM_WORLD). InvalidArgument for a timeout <= 0.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> world(const MpiRuntime& runtime,
                                                                const CommunicatorOptions& o);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CommunicatorOptions& options() const override { return options_; }
  const char* backend() const override { return "mpi"; }
  at::Device device() const override { return at::kCPU; }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void all_gather(const at::Tensor& shard, at::Tensor& full) override;
  std::unique_ptr<Work> all_gather_async(const at::Tensor& shard, at::Tensor& full) override;
  void reduce_scatter(const at::Tensor& full, at::Tensor& shard, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name,
                                                      double timeout_s = 0) override;

  // Point-to-point messages beside the collectives, for announcements a receiver polls for
  // (the weight channel's headers). send_bytes blocks until MPI took the message (under the
  // deadline); try_receive_bytes never blocks for a message that has not arrived: nullopt then.
  // A message's bytes are at most INT_MAX. Used by one thread at a time, like the collectives.
  void send_bytes(int dest, int tag, const std::string& bytes);
  std::optional<std::string> try_receive_bytes(int source, int tag);

 private:
  struct Handle;  // the MPI_Comm
  MpiCommunicator(std::unique_ptr<Handle> handle, const CommunicatorOptions& options);

  std::unique_ptr<Handle> handle_;
  CommunicatorOptions options_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace flywheel::comm
