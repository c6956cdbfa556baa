#include "flywheel/comm/nccl_communicator.h"

#ifdef FLYWHEEL_WITH_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <unistd.h>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "progress_board.h"

namespace flywheel::comm {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    default:
      TORCH_CHECK(false, "NCCL communicator: unsupported dtype ", t);
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

bool is_half(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

void check_cuda(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined() && t.device().is_cuda() && t.is_contiguous(), "NCCL communicator: ", what,
              " needs a contiguous CUDA tensor");
}

void check_nccl(ncclResult_t r, const char* what) {
  TORCH_CHECK(r == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(r));
}

// "host:PCI bus id" of CUDA device `device` on this host.
std::string device_id(int device) {
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, device) != cudaSuccess) {
    std::snprintf(bus, sizeof(bus), "device %d", device);
  }
  char host[128] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, ":", bus);
}

}  // namespace

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
  // The legacy default stream (implicitly ordered with LibTorch's default-stream work), or a
  // stream of this communicator's own (options.own_stream) with an event to order it.
  cudaStream_t stream = cudaStreamLegacy;
  bool own_stream = false;
  cudaEvent_t ready = nullptr;
  ~Handle() {
    if (comm != nullptr) ncclCommDestroy(comm);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (own_stream) cudaStreamDestroy(stream);
  }
  // The stream the next collective runs on: after what the default stream holds now.
  cudaStream_t issue() {
    if (!own_stream) return stream;
    cudaEventRecord(ready, cudaStreamLegacy);
    cudaStreamWaitEvent(stream, ready, 0);
    return stream;
  }
};

// Collectives complete before their call returns, so async work is already done.
class DoneWork final : public Work {
 public:
  void wait() override {}
};

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(
    Communicator& bootstrap, int device, const CommunicatorOptions& options) {
  if (!(options.timeout_s > 0)) {
    return absl::InvalidArgumentError("collective timeout must be > 0 seconds");
  }
  if (cudaSetDevice(device) != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cannot use CUDA device ", device));
  }
  // Every rank on its own GPU, checked before NCCL sees the group.
  constexpr int64_t kIdBytes = 192;
  const std::string mine = device_id(device).substr(0, kIdBytes - 1);
  at::Tensor id_bytes = at::zeros({kIdBytes}, at::kByte);
  std::memcpy(id_bytes.data_ptr(), mine.data(), mine.size());
  at::Tensor all_ids = at::zeros({kIdBytes * bootstrap.size()}, at::kByte);
  bootstrap.all_gather_host(id_bytes, all_ids);
  std::vector<std::string> ids;
  for (int r = 0; r < bootstrap.size(); ++r) {
    ids.emplace_back(reinterpret_cast<const char*>(all_ids.data_ptr<uint8_t>() + r * kIdBytes));
  }
  FLYWHEEL_RETURN_IF_ERROR(check_distinct_devices(ids, options.name));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
    }
  }
  at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof(id))}, at::kByte);
  std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));
  auto handle = std::make_unique<Handle>();
  if (options.own_stream) {
    if (cudaStreamCreateWithFlags(&handle->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&handle->ready, cudaEventDisableTiming) != cudaSuccess) {
      return absl::UnavailableError("cannot create a CUDA stream for the communicator");
    }
    handle->own_stream = true;
  }
  ncclResult_t r = ncclCommInitRank(&handle->comm, bootstrap.size(), id, bootstrap.rank());
  if (r != ncclSuccess) {
    handle->comm = nullptr;
    return absl::UnavailableError(absl::StrCat("ncclCommInitRank: ", ncclGetErrorString(r)));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(handle), device, options));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handle> handle, int device,
                                   const CommunicatorOptions& options)
    : handle_(std::move(handle)), device_(device), options_(options) {
  ncclCommUserRank(handle_->comm, &rank_);
  ncclCommCount(handle_->comm, &size_);
  board_ = ProgressBoard::open(options_.progress_dir, options_.name, rank_, size_);
}

NcclCommunicator::~NcclCommunicator() = default;

void NcclCommunicator::wait(const char* what) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(options_.timeout_s);
  ++seq_;
  if (board_) board_->enter(seq_, what);
  for (int polls = 0;; ++polls) {
    const cudaError_t state = cudaStreamQuery(handle_->stream);
    if (state == cudaSuccess) {
      if (board_) board_->leave(seq_, what);
      return;
    }
    TORCH_CHECK(state == cudaErrorNotReady, "CUDA error during ", what, ": ",
                cudaGetErrorString(state));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(handle_->comm, &async);
    TORCH_CHECK(async == ncclSuccess || async == ncclInProgress, "NCCL ", what,
                " failed: ", ncclGetErrorString(async));
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      report_collective_timeout("nccl", what, options_, rank_, size_, elapsed,
                                board_ ? board_->report(seq_) : "");
      ncclCommAbort(handle_->comm);
      handle_->comm = nullptr;
      std::_Exit(kTimeoutExitCode);
    }
  }
}

void NcclCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cuda(tensor, "all_reduce");
  if (op == ReduceOp::kSum && is_half(tensor)) {  // sums in float32, as communicator.h says
    at::Tensor wide = tensor.to(at::kFloat);
    all_reduce(wide, op);
    tensor.copy_(wide);
    return;
  }
  cudaSetDevice(device_);
  check_nccl(
      ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                    nccl_type(tensor.scalar_type()), nccl_op(op), handle_->comm, handle_->issue()),
      "all_reduce");
  wait("all_reduce");
}

void NcclCommunicator::all_gather(const at::Tensor& shard, at::Tensor& full) {
  check_cuda(shard, "all_gather");
  check_cuda(full, "all_gather");
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "all_gather: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's dtype");
  cudaSetDevice(device_);
  check_nccl(ncclAllGather(shard.data_ptr(), full.data_ptr(), shard.numel(),
                           nccl_type(shard.scalar_type()), handle_->comm, handle_->issue()),
             "all_gather");
  wait("all_gather");
}

std::unique_ptr<Work> NcclCommunicator::all_gather_async(const at::Tensor& shard,
                                                         at::Tensor& full) {
  all_gather(shard, full);
  return std::make_unique<DoneWork>();
}

void NcclCommunicator::reduce_scatter(const at::Tensor& full, at::Tensor& shard, ReduceOp op) {
  check_cuda(full, "reduce_scatter");
  check_cuda(shard, "reduce_scatter");
  if (op == ReduceOp::kSum && is_half(full)) {  // sums in float32, as communicator.h says
    at::Tensor wide = at::empty({shard.numel()}, shard.options().dtype(at::kFloat));
    reduce_scatter(full.to(at::kFloat), wide, op);
    shard.copy_(wide.view(shard.sizes()));
    return;
  }
  TORCH_CHECK(full.numel() == shard.numel() * size_ && full.scalar_type() == shard.scalar_type(),
              "reduce_scatter: full needs ", size_, " x ", shard.numel(),
              " elements of the shard's dtype");
  cudaSetDevice(device_);
  check_nccl(ncclReduceScatter(full.data_ptr(), shard.data_ptr(), shard.numel(),
                               nccl_type(full.scalar_type()), nccl_op(op), handle_->comm,
                               handle_->issue()),
             "reduce_scatter");
  wait("reduce_scatter");
}

void NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cuda(tensor, "broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
  cudaSetDevice(device_);
  check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                           nccl_type(tensor.scalar_type()), root, handle_->comm, handle_->issue()),
             "broadcast");
  wait("broadcast");
}

void NcclCommunicator::barrier() {
  at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
  all_reduce(one, ReduceOp::kSum);
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key,
                                                                      const std::string& name,
                                                                      double timeout_s) {
  barrier();  // under the deadline, before the split (which has none)
  auto handle = std::make_unique<Handle>();
  if (options_.own_stream) {
    if (cudaStreamCreateWithFlags(&handle->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&handle->ready, cudaEventDisableTiming) != cudaSuccess) {
      return absl::UnavailableError("cannot create a CUDA stream for the communicator");
    }
    handle->own_stream = true;
  }
  ncclResult_t r = ncclCommSplit(handle_->comm, color, key, &handle->comm, nullptr);
  if (r != ncclSuccess) {
    handle->comm = nullptr;
    return absl::UnavailableError(absl::StrCat("ncclCommSplit: ", ncclGetErrorString(r)));
  }
  CommunicatorOptions options = options_;
  options.name = name;
  if (timeout_s > 0) options.timeout_s = timeout_s;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(handle), device_, options));
}

}  // namespace flywheel::comm

#else  // !FLYWHEEL_WITH_NCCL

#include <c10/util/Exception.h>
#include "absl/strings/str_cat.h"

namespace flywheel::comm {

// Without NCCL no NcclCommunicator can be created, so none of its methods can be reached.
namespace {
[[noreturn]] void not_built() { TORCH_CHECK(false, "flywheel was built without NCCL"); }
}  // namespace

struct NcclCommunicator::Handle {};

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(
    Communicator&, int, const CommunicatorOptions&) {
  return absl::UnimplementedError(
      "this flywheel was built without NCCL (FLYWHEEL_WITH_NCCL=OFF); use the MPI backend");
}

NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::all_reduce(at::Tensor&, ReduceOp) { not_built(); }
void NcclCommunicator::all_gather(const at::Tensor&, at::Tensor&) { not_built(); }
std::unique_ptr<Work> NcclCommunicator::all_gather_async(const at::Tensor&, at::Tensor&) {
  not_built();
}
void NcclCommunicator::reduce_scatter(const at::Tensor&, at::Tensor&, ReduceOp) { not_built(); }
void NcclCommunicator::broadcast(at::Tensor&, int) { not_built(); }
void NcclCommunicator::barrier() { not_built(); }
absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::split(int, int, const std::string&,
                                                                      double) {
  not_built();
}

}  // namespace flywheel::comm

#endif  // FLYWHEEL_WITH_NCCL
