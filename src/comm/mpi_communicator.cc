#include "flywheel/comm/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "progress_board.h"
#include "watchdog.h"

namespace flywheel::comm {
namespace {

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kLong:
      return MPI_INT64_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kByte:
    case at::kBool:
      return MPI_UINT8_T;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;  // moved as bits; never reduced as such
    default:
      TORCH_CHECK(false, "MPI communicator: unsupported dtype ", t);
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

const char* op_name(ReduceOp op) {
  return op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "min";
}

bool is_half(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

int count_of(const at::Tensor& t) {
  TORCH_CHECK(t.numel() <= INT_MAX, "MPI communicator: ", t.numel(),
              " elements exceed one MPI call's count");
  return static_cast<int>(t.numel());
}

void check_cpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), "MPI communicator: ", what,
              " needs a contiguous CPU tensor");
}

}  // namespace

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  ~Handle() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }
};

// all_gather_async: MPI's nonblocking collectives progress only inside MPI calls, so a
// collective left in flight would not overlap anything; it completes before returning.
class DoneWork final : public Work {
 public:
  void wait() override {}
};

// Runs a blocking MPI call under the communicator's deadline.
#define FLYWHEEL_MPI_TIMED(what, call)                                 \
  do {                                                                 \
    const Watchdog::Armed armed(*watchdog_, what, options_.timeout_s); \
    call;                                                              \
  } while (0)

// The same for a point-to-point call, which only some ranks of the group make.
#define FLYWHEEL_MPI_TIMED_P2P(what, call)                                    \
  do {                                                                        \
    const Watchdog::Armed armed(*watchdog_, what, options_.timeout_s, false); \
    call;                                                                     \
  } while (0)

absl::StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int* argc, char*** argv) {
  std::unique_ptr<MpiRuntime> runtime(new MpiRuntime());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // SERIALIZED: a rollout rank's weight fetcher thread makes MPI calls after its main thread
    // made the start-up ones (never two threads at once).
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return absl::UnavailableError("MPI_Init_thread failed");
    }
    runtime->finalize_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &runtime->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &runtime->size_);
  return runtime;
}

void MpiRuntime::abort(int exit_code) const {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; the compiler cannot know
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle, const CommunicatorOptions& options)
    : handle_(std::move(handle)), options_(options) {
  MPI_Comm_rank(handle_->comm, &rank_);
  MPI_Comm_size(handle_->comm, &size_);
  watchdog_ = std::make_unique<Watchdog>(
      [this](const std::string& what, double elapsed, const std::string& board) {
        report_collective_timeout("mpi", what, options_, rank_, size_, elapsed, board);
        std::_Exit(kTimeoutExitCode);  // mpirun then ends every rank of the job
      },
      ProgressBoard::open(options_.progress_dir, options_.name, rank_, size_));
}

MpiCommunicator::~MpiCommunicator() = default;

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::world(
    const MpiRuntime&, const CommunicatorOptions& options) {
  if (!(options.timeout_s > 0)) {
    return absl::InvalidArgumentError("collective timeout must be > 0 seconds");
  }
  auto handle = std::make_unique<Handle>();
  if (MPI_Comm_dup(MPI_COMM_WORLD, &handle->comm) != MPI_SUCCESS) {
    return absl::UnavailableError("MPI_Comm_dup failed");
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(handle), options));
}

void MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cpu(tensor, "all_reduce");
  if (size_ == 1) return;  // MPI would copy through a buffer it allocates per call
  if (is_half(tensor)) {
    at::Tensor wide = tensor.to(at::kFloat);
    all_reduce(wide, op);
    tensor.copy_(wide);
    return;
  }
  FLYWHEEL_MPI_TIMED(op == ReduceOp::kSum ? "all_reduce(sum)" : op_name(op),
                     MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor),
                                   mpi_type(tensor.scalar_type()), mpi_op(op), handle_->comm));
}

std::unique_ptr<Work> MpiCommunicator::all_gather_async(const at::Tensor& shard, at::Tensor& full) {
  all_gather(shard, full);
  return std::make_unique<DoneWork>();
}

void MpiCommunicator::all_gather(const at::Tensor& shard, at::Tensor& full) {
  check_cpu(shard, "all_gather");
  check_cpu(full, "all_gather");
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "all_gather: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's "
              "dtype, got ",
              full.numel(), " of ", full.scalar_type());
  if (size_ == 1) {
    full.copy_(shard.view(full.sizes()));
    return;
  }
  const MPI_Datatype type = mpi_type(shard.scalar_type());
  FLYWHEEL_MPI_TIMED("all_gather",
                     MPI_Allgather(shard.data_ptr(), count_of(shard), type, full.data_ptr(),
                                   count_of(shard), type, handle_->comm));
}

void MpiCommunicator::reduce_scatter(const at::Tensor& full, at::Tensor& shard, ReduceOp op) {
  check_cpu(full, "reduce_scatter");
  check_cpu(shard, "reduce_scatter");
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "reduce_scatter: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's dtype");
  if (size_ == 1) {
    shard.copy_(full.view(shard.sizes()));
    return;
  }
  if (is_half(full)) {
    at::Tensor wide = at::empty({shard.numel()}, shard.options().dtype(at::kFloat));
    reduce_scatter(full.to(at::kFloat), wide, op);
    shard.copy_(wide.view(shard.sizes()));
    return;
  }
  // A ring of Sendrecv: OpenMPI's MPI_Reduce_scatter_block took ~1.9 s for 400 MB on two ranks
  // (buffers it allocates per call); the ring moves (size - 1) / size of the data once.
  const int64_t n = shard.numel();
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  auto chunk = [&](int k) { return full.narrow(0, static_cast<int64_t>(k) * n, n); };
  at::Tensor flat_shard = shard.view({-1});
  at::Tensor received = at::empty({n}, full.options());
  at::Tensor carry = chunk(prev).contiguous();  // what this rank passes on first
  const MPI_Datatype type = mpi_type(full.scalar_type());
  for (int step = 0; step + 1 < size_; ++step) {
    FLYWHEEL_MPI_TIMED(
        "reduce_scatter",
        MPI_Sendrecv(carry.data_ptr(), count_of(carry), type, next, 0, received.data_ptr(),
                     count_of(received), type, prev, 0, handle_->comm, MPI_STATUS_IGNORE));
    // The chunk just received, with this rank's own contribution added.
    const int k = ((rank_ - step - 2) % size_ + size_) % size_;
    at::Tensor target = step + 2 == size_ ? flat_shard : at::empty({n}, full.options());
    switch (op) {
      case ReduceOp::kSum:
        at::add_out(target, chunk(k), received);
        break;
      case ReduceOp::kMax:
        at::maximum_out(target, chunk(k), received);
        break;
      case ReduceOp::kMin:
        at::minimum_out(target, chunk(k), received);
        break;
    }
    carry = target;
  }
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
  if (size_ == 1) return;
  FLYWHEEL_MPI_TIMED("broadcast", MPI_Bcast(tensor.data_ptr(), count_of(tensor),
                                            mpi_type(tensor.scalar_type()), root, handle_->comm));
}

void MpiCommunicator::barrier() { FLYWHEEL_MPI_TIMED("barrier", MPI_Barrier(handle_->comm)); }

void MpiCommunicator::send_bytes(int dest, int tag, const std::string& bytes) {
  TORCH_CHECK(dest >= 0 && dest < size_ && dest != rank_, "send_bytes: bad destination ", dest);
  TORCH_CHECK(bytes.size() <= INT_MAX, "send_bytes: ", bytes.size(), " bytes in one message");
  FLYWHEEL_MPI_TIMED_P2P("send", MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE,
                                          dest, tag, handle_->comm));
}

std::optional<std::string> MpiCommunicator::try_receive_bytes(int source, int tag) {
  int arrived = 0;
  MPI_Status status;
  MPI_Iprobe(source, tag, handle_->comm, &arrived, &status);
  if (!arrived) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string bytes(static_cast<size_t>(count), '\0');
  // The message has arrived (probed): receiving it does not wait for the sender.
  FLYWHEEL_MPI_TIMED_P2P("receive", MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag,
                                             handle_->comm, MPI_STATUS_IGNORE));
  return bytes;
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key,
                                                                     const std::string& name,
                                                                     double timeout_s) {
  auto handle = std::make_unique<Handle>();
  int rc = MPI_SUCCESS;
  FLYWHEEL_MPI_TIMED("split", rc = MPI_Comm_split(handle_->comm, color, key, &handle->comm));
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("MPI_Comm_split of group '", options_.name, "' failed"));
  }
  CommunicatorOptions options = options_;
  options.name = name;
  if (timeout_s > 0) options.timeout_s = timeout_s;
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(handle), options));
}

}  // namespace flywheel::comm
