#include "flywheel/comm/mpmd.h"

#include <cstdlib>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "flywheel/comm/nccl_communicator.h"

namespace flywheel::comm {

namespace {

// The weight groups' share of cluster.collective_timeout_s.
constexpr double kWeightsTimeoutShare = 0.8;

}  // namespace

CommunicatorOptions collective_options(const std::string& name, const core::Config& config) {
  CommunicatorOptions o;
  o.name = name;
  o.timeout_s = config.cluster.collective_timeout_s;
  if (!config.logging.run_dir.empty()) o.progress_dir = config.logging.run_dir + "/progress";
  return o;
}

absl::StatusOr<MpmdWorld> join_mpmd_world(const comm::MpiRuntime& runtime, Role role,
                                          const core::Config& config) {
  MpmdWorld out;
  auto world = comm::MpiCommunicator::world(runtime, collective_options("world", config));
  if (!world.ok()) return world.status();
  out.world = std::move(*world);
  const int color = static_cast<int>(role);
  auto split = out.world->split(color, out.world->rank(),
                                role == Role::kLearner ? "learners" : "rollout workers");
  if (!split.ok()) return split.status();
  out.role = std::move(*split);
  // Learner rank 0 hosts the controller and broadcasts on the world from world rank 0.
  const bool leader = role == Role::kLearner && out.role->rank() == 0;
  at::Tensor where = at::full({2}, 0, at::kLong);
  where[0] = leader ? out.world->rank() : 0;
  where[1] = role == Role::kLearner ? 1 : 0;
  out.world->all_reduce_host(where, comm::ReduceOp::kSum);
  if (where[1].item<int64_t>() == 0) {
    return absl::FailedPreconditionError(
        "this MPI job has no `flywheel learner` ranks: rollout ranks need learners in the same "
        "mpirun, or run them without mpirun with --controller HOST:PORT");
  }
  if (where[0].item<int64_t>() != 0) {
    return absl::FailedPreconditionError(
        "learner rank 0 must be world rank 0: list `flywheel learner` first in the MPMD "
        "command line");
  }
  return out;
}

absl::StatusOr<WeightGroup> join_weight_group(MpmdWorld& world, Role role,
                                              const core::Config& config, int cuda_device) {
  const core::WeightTransport transport = core::weight_transport(config.weight_sync);
  const bool sender = role == Role::kLearner && world.role->rank() == 0;
  // The rollout ranks: the world less the learners (every rank knows its own role's size).
  const int rollout_ranks =
      role == Role::kRollout ? world.role->size() : world.world->size() - world.role->size();
  if (rollout_ranks == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight_sync.transport ", core::choice_name(transport),
        " sends weights to the rollout ranks of the learners' MPMD mpirun, and this job has "
        "none: start them in the same mpirun (mpirun ... flywheel learner c.yaml : ... flywheel "
        "rollout c.yaml), or use transport grpc"));
  }
  const bool member = sender || role == Role::kRollout;
  // Each group its own name: the names key the progress records (progress_board.h). The
  // weight transfer times out before the other learners, who wait for rank 0 in their own next
  // collective while it sends, give up on it: the first error names the stuck worker.
  const double timeout_s = kWeightsTimeoutShare * config.cluster.collective_timeout_s;
  auto control = world.world->split(member ? 0 : 1, world.world->rank(),
                                    member ? "weights" : "weights (other learners)", timeout_s);
  if (!control.ok()) return control.status();
  WeightGroup out;
  out.control = std::move(*control);
  if (!member) return out;
  comm::Communicator* data = out.control.get();
  if (transport == core::WeightTransport::kNccl) {
    if (cuda_device < 0) {
      return absl::FailedPreconditionError(
          "weight_sync.transport nccl needs a CUDA GPU on every learner and rollout rank");
    }
    comm::CommunicatorOptions options = collective_options("weights (nccl)", config);
    options.timeout_s = timeout_s;
    // A worker receives on a stream of its own: its engine keeps the default stream busy.
    options.own_stream = role == Role::kRollout;
    auto nccl = comm::NcclCommunicator::create(*out.control, cuda_device, options);
    if (!nccl.ok()) return nccl.status();
    out.nccl = std::move(*nccl);
    data = out.nccl.get();
  }
  out.channel = std::make_unique<comm::WeightChannel>(
      static_cast<comm::MpiCommunicator*>(out.control.get()), data);
  return out;
}

int local_cuda_device(int fallback) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus < 1) return -1;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return (local != nullptr ? std::atoi(local) : fallback) % gpus;
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<comm::Communicator>> learner_nccl(const MpmdWorld& world,
                                                                 const core::Config& config) {
  const core::Config& c = config;
  const bool use_nccl =
      c.cluster.backend == core::CommBackend::kNccl ||
      (c.cluster.backend == core::CommBackend::kAuto &&
       core::on_cuda(c.model.device, static_cast<int>(torch::cuda::device_count())));
  if (!use_nccl) return std::unique_ptr<comm::Communicator>();
  const int device = local_cuda_device(world.role->rank());
  if (device < 0) return absl::FailedPreconditionError("cluster.backend nccl needs a CUDA GPU");
  auto created =
      comm::NcclCommunicator::create(*world.role, device, collective_options("learners (nccl)", c));
  if (!created.ok()) return created.status();
  return std::unique_ptr<comm::Communicator>(std::move(*created));
}

}  // namespace flywheel::comm
