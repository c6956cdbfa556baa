#include "flywheel/comm/communicator.h"

#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flywheel::comm {

void Communicator::all_reduce_host(at::Tensor& cpu_tensor, ReduceOp op) {
  if (device().is_cpu()) {
    all_reduce(cpu_tensor, op);
    return;
  }
  at::Tensor on_device = cpu_tensor.to(device()).contiguous();
  all_reduce(on_device, op);
  cpu_tensor.copy_(on_device);
}

void Communicator::all_gather_host(const at::Tensor& cpu_shard, at::Tensor& cpu_full) {
  if (device().is_cpu()) {
    all_gather(cpu_shard, cpu_full);
    return;
  }
  at::Tensor full = at::empty(cpu_full.sizes(), cpu_full.options().device(device()));
  all_gather(cpu_shard.to(device()).contiguous(), full);
  cpu_full.copy_(full);
}

void Communicator::broadcast_host(at::Tensor& cpu_tensor, int root) {
  if (device().is_cpu()) {
    broadcast(cpu_tensor, root);
    return;
  }
  at::Tensor on_device = cpu_tensor.to(device()).contiguous();
  broadcast(on_device, root);
  cpu_tensor.copy_(on_device);
}

absl::Status check_distinct_devices(const std::vector<std::string>& device_ids,
                                    const std::string& name) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (size_t r = 0; r < device_ids.size(); ++r) ranks_of[device_ids[r]].push_back(r);
  std::vector<std::string> shared;
  for (const auto& [id, ranks] : ranks_of) {
    if (ranks.size() > 1) {
      shared.push_back(absl::StrCat("ranks ", absl::StrJoin(ranks, ", "), " are all on ", id));
    }
  }
  if (shared.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "group '", name, "': ", absl::StrJoin(shared, "; "),
      "; NCCL needs one GPU per rank of a communicator: give each process its own GPU "
      "(CUDA_VISIBLE_DEVICES, one GPU per process under flywheel train) or start fewer ranks "
      "per node"));
}

std::string broadcast_string(Communicator& comm, const std::string& value, int64_t chunk_bytes) {
  TORCH_CHECK(chunk_bytes > 0, "broadcast_string: chunk_bytes must be > 0");
  at::Tensor size =
      at::full({1}, comm.rank() == 0 ? static_cast<int64_t>(value.size()) : 0, at::kLong);
  comm.broadcast_host(size, 0);
  const int64_t n = size.item<int64_t>();
  std::string out = comm.rank() == 0 ? value : std::string(static_cast<size_t>(n), '\0');
  for (int64_t at = 0; at < n; at += chunk_bytes) {
    at::Tensor piece = at::from_blob(out.data() + at, {std::min(chunk_bytes, n - at)}, at::kByte);
    comm.broadcast_host(piece, 0);
  }
  return out;
}

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace flywheel::comm
