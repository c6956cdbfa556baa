#include "flywheel/comm/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"

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

class MpiCommunicator::Request final : public Work {
 public:
  Request(const MpiCommunicator* owner, MPI_Request request, const char* what)
      : owner_(owner), request_(request), what_(what) {}
  ~Request() override {
    if (request_ != MPI_REQUEST_NULL) owner_->wait(&request_, what_);
  }
  void wait() override { owner_->wait(&request_, what_); }

 private:
  const MpiCommunicator* owner_;
  MPI_Request request_;
  const char* what_;
};

absl::StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int* argc, char*** argv) {
  std::unique_ptr<MpiRuntime> runtime(new MpiRuntime());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      return absl::UnavailableError("MPI_Init_thread failed");
    }
    runtime->finalize_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &runtime->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &runtime->size_);
  return runtime;
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

void MpiCommunicator::wait(void* request, const char* what) const {
  auto* r = static_cast<MPI_Request*>(request);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(options_.timeout_s);
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    // Yield first (short collectives), then sleep a little: a waiting rank must leave the core
    // to the rank it waits for when ranks share cores.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const std::string message = absl::StrCat(
          "collective ", what, " on group '", options_.name, "' (", backend(), ") timed out: rank ",
          rank_, " of ", size_, " waited ", elapsed, " s (timeout ", options_.timeout_s,
          " s); a rank stopped responding. Aborting the job.");
      FLYWHEEL_LOG_ERROR("%s", message);
      std::fprintf(stderr, "flywheel: %s\n", message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, kTimeoutExitCode);
      std::_Exit(kTimeoutExitCode);
    }
  }
}

void MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cpu(tensor, "all_reduce");
  if (is_half(tensor)) {
    at::Tensor wide = tensor.to(at::kFloat);
    all_reduce(wide, op);
    tensor.copy_(wide);
    return;
  }
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor.scalar_type()),
                 mpi_op(op), handle_->comm, &request);
  wait(&request, op == ReduceOp::kSum ? "all_reduce(sum)" : op_name(op));
}

void MpiCommunicator::all_gather(const at::Tensor& shard, at::Tensor& full) {
  all_gather_async(shard, full)->wait();
}

std::unique_ptr<Work> MpiCommunicator::all_gather_async(const at::Tensor& shard, at::Tensor& full) {
  check_cpu(shard, "all_gather");
  check_cpu(full, "all_gather");
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "all_gather: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's "
              "dtype, got ",
              full.numel(), " of ", full.scalar_type());
  MPI_Request request;
  const MPI_Datatype type = mpi_type(shard.scalar_type());
  MPI_Iallgather(shard.data_ptr(), count_of(shard), type, full.data_ptr(), count_of(shard), type,
                 handle_->comm, &request);
  return std::make_unique<Request>(this, request, "all_gather");
}

void MpiCommunicator::reduce_scatter(const at::Tensor& full, at::Tensor& shard, ReduceOp op) {
  check_cpu(full, "reduce_scatter");
  check_cpu(shard, "reduce_scatter");
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "reduce_scatter: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's dtype");
  if (is_half(full)) {
    at::Tensor wide = at::empty({shard.numel()}, shard.options().dtype(at::kFloat));
    reduce_scatter(full.to(at::kFloat), wide, op);
    shard.copy_(wide.view(shard.sizes()));
    return;
  }
  MPI_Request request;
  MPI_Ireduce_scatter_block(full.data_ptr(), shard.data_ptr(), count_of(shard),
                            mpi_type(full.scalar_type()), mpi_op(op), handle_->comm, &request);
  wait(&request, "reduce_scatter");
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
  MPI_Request request;
  MPI_Ibcast(tensor.data_ptr(), count_of(tensor), mpi_type(tensor.scalar_type()), root,
             handle_->comm, &request);
  wait(&request, "broadcast");
}

void MpiCommunicator::barrier() {
  MPI_Request request;
  MPI_Ibarrier(handle_->comm, &request);
  wait(&request, "barrier");
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key,
                                                                     const std::string& name) {
  // A barrier under the deadline first, so that a missing rank times out here rather than
  // hanging in MPI_Comm_split, which has no nonblocking form.
  barrier();
  auto handle = std::make_unique<Handle>();
  if (MPI_Comm_split(handle_->comm, color, key, &handle->comm) != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("MPI_Comm_split of group '", options_.name, "' failed"));
  }
  CommunicatorOptions options = options_;
  options.name = name;
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(handle), options));
}

}  // namespace flywheel::comm
