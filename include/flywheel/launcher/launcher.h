// `flywheel train`'s launcher: starts the learner job under mpirun (cluster.num_learners ranks;
// rank 0 hosts the controller) and rollout.num_workers local rollout workers (or, with
// weight_sync.transport mpi / nccl, the workers as ranks of the same mpirun); restarts a worker
// that crashes (at most trainer.max_worker_restarts times), gives up on one that cannot start;
// stops everything on completion or Ctrl-C (the first asks the learners to checkpoint and stop,
// a second kills everything); writes a plot of reward and held-out accuracy at the end.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/launcher/child_process.h"
#include "flywheel/launcher/gpu_placement.h"

namespace flywheel::launcher {

// `flywheel rollout`'s exit status when it failed before it served the controller (a model,
// tokenizer, reward or plugin it cannot load): restarting it would fail the same way.
inline constexpr int kExitStartFailure = 3;

// The command line a run was started with, so that --resume repeats it.
struct Launch {
  std::string config;  // absolute
  std::vector<std::string> overrides;
};

// <run_dir>/launch.json: the command line of the run in `run_dir`, for --resume. NotFound when
// `run_dir` holds none; InvalidArgument for a malformed one.
absl::Status write_launch(const std::string& run_dir, const Launch& launch);
absl::StatusOr<Launch> read_launch(const std::string& run_dir);

class Launcher {
 public:
  // `config` (the run's, resolved) must outlive the launcher; `threads` per child process.
  Launcher(const core::Config& config, Launch launch, int threads);

  // Until the learner job ends (OK when it succeeded), a second Ctrl-C, or every worker given
  // up. Children never outlive it.
  absl::Status run();

 private:
  std::vector<std::string> job_args(const std::string& command) const;
  std::map<std::string, std::string> child_env() const;
  absl::Status start_learners();
  absl::Status start_worker(size_t index);
  // After worker `index` exited with `status`: schedules its restart, or gives up on it.
  void worker_exited(size_t index, int status);
  // Every worker is gone for good (given up or finished with an error): why, with their logs.
  std::optional<std::string> no_worker_left() const;
  std::string worker_log(size_t index) const;
  void stop_workers();
  void plot() const;

  const core::Config& c_;
  Launch launch_;
  int threads_;
  std::string self_;  // this binary
  std::string run_dir_;
  std::string stop_file_;  // <run_dir>/STOP: asks the learners to stop
  std::string address_;
  // weight_sync.transport mpi / nccl: the workers run inside the learners' mpirun (MPMD), so the
  // launcher neither starts nor restarts them.
  bool mpmd_;
  std::optional<ChildProcess> learners_;
  std::vector<std::optional<ChildProcess>> workers_;
  std::vector<int> restarts_, start_failures_;
  std::vector<bool> given_up_, finished_;
  std::vector<std::string> last_exit_;
  std::vector<std::optional<std::chrono::steady_clock::time_point>> restart_at_;
  GpuPlacement gpus_;  // model.device cuda only
};

}  // namespace flywheel::launcher
