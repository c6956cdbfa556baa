#include "flywheel/comm/communicator.h"

#include <ATen/ATen.h>

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

}  // namespace flywheel::comm
