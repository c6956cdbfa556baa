#include "flywheel/launcher/gpu_placement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flywheel::launcher {

absl::StatusOr<GpuPlacement> place_on_gpus(const GpuPlacementRequest& request) {
  const int64_t gpus = static_cast<int64_t>(request.visible.size());
  if (gpus == 0) {
    return absl::FailedPreconditionError(
        "model.device is cuda but no GPU is visible (CUDA_VISIBLE_DEVICES, nvidia-smi)");
  }
  if (request.learners > gpus) {
    return absl::FailedPreconditionError(absl::StrCat("cluster.num_learners ", request.learners,
                                                      " needs one GPU per learner rank, and ", gpus,
                                                      " are visible"));
  }
  if (request.mpmd && request.nccl_weights && request.learners + request.workers > gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight_sync.transport nccl puts learner rank 0 and every rollout worker in one NCCL "
        "group, which needs a GPU each: ",
        request.learners, " learners + ", request.workers, " workers, ", gpus,
        " GPUs visible; use fewer workers or transport mpi / grpc"));
  }
  GpuPlacement out;
  const std::vector<std::string> learner_gpus(request.visible.begin(),
                                              request.visible.begin() + request.learners);
  // The GPUs workers take: those after the learners', else (none left) all of them.
  std::vector<std::string> pool(request.visible.begin() + request.learners, request.visible.end());
  if (pool.empty()) pool = request.visible;
  if (request.mpmd) {
    // One mpirun: learners on the first GPUs by local rank, workers after them.
    std::vector<std::string> all = learner_gpus;
    for (int64_t w = 0; w < request.workers && all.size() < request.visible.size(); ++w) {
      all.push_back(request.visible[all.size()]);
    }
    out.learners = absl::StrJoin(all, ",");
  } else {
    out.learners = absl::StrJoin(learner_gpus, ",");
    for (int64_t w = 0; w < request.workers; ++w) out.workers.push_back(pool[w % pool.size()]);
  }
  if (request.learners + request.workers > gpus) {
    out.note = absl::StrCat(request.learners + request.workers, " processes on ", gpus,
                            " GPU(s): rollout workers share GPU(s) ", absl::StrJoin(pool, ","));
  }
  return out;
}

std::vector<std::string> visible_gpus(const char* cuda_visible_devices, int count) {
  std::vector<std::string> out;
  if (cuda_visible_devices != nullptr) {
    for (absl::string_view id : absl::StrSplit(cuda_visible_devices, ',')) {
      id = absl::StripAsciiWhitespace(id);
      if (!id.empty()) out.emplace_back(id);
    }
    return out;
  }
  for (int i = 0; i < count; ++i) out.push_back(std::to_string(i));
  return out;
}

}  // namespace flywheel::launcher
