#include "flywheel/launcher/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kLaunchFile[] = "launch.json";
// A worker that fails while starting (kExitStartFailure) is started again at most this often.
constexpr int kMaxStartRetries = 2;
constexpr int kLogLinesInErrors = 6;

// The last `n` lines of the file at `path` ("" when unreadable).
std::string last_lines(const std::string& path, int n) {
  absl::StatusOr<std::string> text = core::read_file(path);
  if (!text.ok()) return "";
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  const size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, "    ", lines[i], "\n");
  return out;
}

std::string self_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "flywheel" : p.string();
}

}  // namespace

absl::Status write_launch(const std::string& run_dir, const Launch& launch) {
  core::Json overrides = core::Json::array();
  for (const std::string& o : launch.overrides) overrides.push_back(o);
  core::Json json = core::Json::object();
  json.set("config", launch.config);
  json.set("overrides", std::move(overrides));
  return core::write_file_atomically((fs::path(run_dir) / kLaunchFile).string(),
                                     json.dump() + "\n");
}

absl::StatusOr<Launch> read_launch(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / kLaunchFile).string();
  absl::StatusOr<std::string> text = core::read_file(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(run_dir, " is not a run directory of flywheel train (",
                                            text.status().message(), ")"));
  }
  absl::StatusOr<core::Json> json = core::Json::parse(*text);
  if (!json.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", json.status().message()));
  Launch launch;
  const core::Json* config = json->find("config");
  const core::Json* overrides = json->find("overrides");
  if (config == nullptr || !config->is_string() || overrides == nullptr || !overrides->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected \"config\" and \"overrides\""));
  }
  launch.config = config->as_string();
  for (const core::Json& o : overrides->as_array()) {
    if (!o.is_string()) return absl::InvalidArgumentError(absl::StrCat(path, ": bad override"));
    launch.overrides.push_back(o.as_string());
  }
  return launch;
}

Launcher::Launcher(const core::Config& config, Launch launch, int threads)
    : c_(config),
      launch_(std::move(launch)),
      threads_(threads),
      self_(self_path()),
      run_dir_(config.logging.run_dir),
      stop_file_((fs::path(config.logging.run_dir) / "STOP").string()),
      mpmd_(core::weight_transport(config.weight_sync) != core::WeightTransport::kGrpc) {}

std::vector<std::string> Launcher::job_args(const std::string& command) const {
  std::vector<std::string> args = {self_, command, launch_.config};
  for (const std::string& o : launch_.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  args.push_back("--set");
  args.push_back(absl::StrCat("cluster.threads_per_process=", threads_));
  return args;
}

std::map<std::string, std::string> Launcher::child_env() const {
  std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", std::to_string(threads_)},
                                            {"OPENBLAS_NUM_THREADS", std::to_string(threads_)},
                                            {"FLYWHEEL_LAUNCHER_PID", std::to_string(getpid())},
                                            {"FLYWHEEL_STOP_FILE", stop_file_}};
  if (geteuid() == 0) {  // OpenMPI refuses root without these
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return env;
}

std::string Launcher::worker_log(size_t index) const {
  return (fs::path(run_dir_) / "logs" / absl::StrCat("worker-", index, ".log")).string();
}

void Launcher::worker_exited(size_t i, int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    finished_[i] = true;  // no work left
    return;
  }
  last_exit_[i] = describe_exit(status);
  const bool start_failure = WIFEXITED(status) && WEXITSTATUS(status) == kExitStartFailure;
  start_failures_[i] = start_failure ? start_failures_[i] + 1 : 0;
  if (start_failure ? start_failures_[i] > kMaxStartRetries
                    : restarts_[i] >= c_.cluster.max_worker_restarts) {
    given_up_[i] = true;
    std::cerr << "flywheel train: worker-" << i << " exited (" << last_exit_[i] << ") "
              << (start_failure ? absl::StrCat(start_failures_[i], " times while starting")
                                : absl::StrCat("after ", restarts_[i], " restarts"))
              << "; not restarting it\n";
    return;
  }
  ++restarts_[i];
  std::cerr << "flywheel train: worker-" << i << " exited (" << last_exit_[i]
            << "); restarting it (restart " << restarts_[i] << ")\n";
  // A moment later, so that a worker that lost the controller because training is ending is
  // not started again.
  restart_at_[i] = Clock::now() + std::chrono::seconds(1);
}

std::optional<std::string> Launcher::no_worker_left() const {
  if (workers_.empty()) return std::nullopt;
  std::string why;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] || restart_at_[i] || finished_[i]) return std::nullopt;
    absl::StrAppend(&why, "\n  worker-", i, " (", last_exit_[i], "), the end of ", worker_log(i),
                    ":\n", last_lines(worker_log(i), kLogLinesInErrors));
  }
  return absl::StrCat(
      "no rollout worker is left (each exited and was not restarted); the "
      "learners are stopped:",
      why);
}

absl::Status Launcher::start_learners() {
  std::vector<std::string> argv;
  const std::string mpirun = find_on_path("mpirun");
  if (!mpirun.empty()) {
    argv = {mpirun,      "-np", std::to_string(c_.cluster.num_learners), "--oversubscribe",
            "--bind-to", "none"};
    for (const auto& [name, value] : child_env()) {
      argv.push_back("-x");
      argv.push_back(name);
    }
  } else if (c_.cluster.num_learners > 1) {
    return absl::FailedPreconditionError(
        "mpirun is not on PATH: it starts the learner job (cluster.num_learners > 1)");
  }
  for (const std::string& a : job_args("learner")) argv.push_back(a);
  if (mpmd_) {
    // The workers are ranks of the same mpirun (a second app context) and receive the weights
    // over its MPI (or NCCL) channel; each writes logs/worker-RANK.log.
    if (mpirun.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("mpirun is not on PATH: weight_sync.transport ",
                       core::choice_name(core::weight_transport(c_.weight_sync)),
                       " runs the rollout workers inside the learners' mpirun"));
    }
    argv.insert(argv.end(), {":", "-np", std::to_string(c_.rollout.num_workers)});
    for (const auto& [name, value] : child_env()) {
      argv.push_back("-x");
      argv.push_back(name);
    }
    for (const std::string& a : job_args("rollout")) argv.push_back(a);
    argv.push_back("--log-file");
    argv.push_back((fs::path(run_dir_) / "logs" / "worker-{rank}.log").string());
  }
  ChildOptions o;
  o.argv = std::move(argv);
  o.env = child_env();
  if (!gpus_.learners.empty()) o.env["CUDA_VISIBLE_DEVICES"] = gpus_.learners;
  auto child = ChildProcess::start(o);
  if (!child.ok()) return child.status();
  learners_ = std::move(*child);
  return absl::OkStatus();
}

absl::Status Launcher::start_worker(size_t index) {
  ChildOptions o;
  o.argv = job_args("rollout");
  o.argv.push_back("--controller");
  o.argv.push_back(address_);
  o.argv.push_back("--worker-id");
  o.argv.push_back(
      absl::StrCat("worker-", index, restarts_[index] ? absl::StrCat(".", restarts_[index]) : ""));
  o.env = child_env();
  if (index < gpus_.workers.size()) o.env["CUDA_VISIBLE_DEVICES"] = gpus_.workers[index];
  o.log_file = worker_log(index);
  auto child = ChildProcess::start(o);
  if (!child.ok()) return child.status();
  workers_[index] = std::move(*child);
  return absl::OkStatus();
}

void Launcher::stop_workers() {
  for (auto& w : workers_) {
    if (w && w->running()) w->signal(SIGTERM);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  bool any = true;
  while (any && Clock::now() < deadline) {
    any = false;
    for (auto& w : workers_) {
      int status = 0;
      if (w && !w->poll(&status)) any = true;
    }
    if (any) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& w : workers_) {
    int status = 0;
    if (w && w->running()) {
      w->signal(SIGKILL);
      while (!w->poll(&status)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void Launcher::plot() const {
  ChildOptions o;
  const std::string png = (fs::path(run_dir_) / "plot.png").string();
  o.argv = {self_, "plot", run_dir_, "-m", "critic/score/mean,eval/accuracy", "-o", png};
  o.log_file = (fs::path(run_dir_) / "logs" / "plot.log").string();
  auto child = ChildProcess::start(o);
  if (!child.ok()) return;
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!child->poll(&status)) {
    if (Clock::now() > deadline) child->signal(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::cerr << "flywheel train: plot of reward and held-out accuracy in " << png << "\n";
  } else {
    std::cerr << "flywheel train: no plot (" << describe_exit(status) << "; see " << o.log_file
              << ")\n";
  }
}

absl::Status Launcher::run() {
  std::error_code ec;
  fs::create_directories(fs::path(run_dir_) / "logs", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", run_dir_, ": ", ec.message()));
  fs::remove(fs::path(run_dir_) / "controller_address", ec);
  fs::remove(stop_file_, ec);
  FLYWHEEL_RETURN_IF_ERROR(write_launch(run_dir_, launch_));

  // Signals are taken here, synchronously; children get them only from the launcher.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (core::on_cuda(c_.model.device, static_cast<int>(torch::cuda::device_count()))) {
    GpuPlacementRequest request;
    request.learners = c_.cluster.num_learners;
    request.workers = c_.rollout.num_workers;
    request.visible = visible_gpus(std::getenv("CUDA_VISIBLE_DEVICES"),
                                   static_cast<int>(torch::cuda::device_count()));
    request.mpmd = mpmd_;
    request.nccl_weights = core::weight_transport(c_.weight_sync) == core::WeightTransport::kNccl;
    FLYWHEEL_ASSIGN_OR_RETURN(GpuPlacement placed, place_on_gpus(request));
    gpus_ = std::move(placed);
    std::cerr << "flywheel train: learners on GPU(s) " << gpus_.learners
              << (gpus_.workers.empty()
                      ? ""
                      : absl::StrCat(", workers on ", absl::StrJoin(gpus_.workers, ",")))
              << (gpus_.note.empty() ? "" : absl::StrCat(" (", gpus_.note, ")")) << "\n";
  }
  absl::Status s = start_learners();
  if (!s.ok()) return s;
  const size_t n = c_.rollout.num_workers;
  workers_.resize(mpmd_ ? 0 : n);
  restarts_.assign(n, 0);
  start_failures_.assign(n, 0);
  given_up_.assign(n, false);
  finished_.assign(n, false);
  last_exit_.assign(n, "");
  restart_at_.assign(n, std::nullopt);
  std::optional<std::string> failure;  // why the launcher stopped the run
  int stop_requests = 0;
  int learner_status = 0;
  bool learner_done = false;
  const std::string address_file = (fs::path(run_dir_) / "controller_address").string();
  while (!learner_done) {
    timespec tick{0, 100 * 1000 * 1000};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) {
      ++stop_requests;
      if (stop_requests == 1) {
        std::cerr << "\nflywheel train: stopping: the learners checkpoint after this step "
                     "(Ctrl-C again to kill everything now)\n";
        absl::Status touched = core::write_file_atomically(stop_file_, "stop\n");
        if (!touched.ok()) learners_->signal(SIGTERM);
      } else {
        std::cerr << "flywheel train: killing every process\n";
        learners_->signal(SIGKILL);
      }
    }
    if (learners_->poll(&learner_status)) {
      learner_done = true;
      break;
    }
    if (address_.empty()) {
      absl::StatusOr<std::string> text = core::read_file(address_file);
      if (!text.ok()) continue;  // the learners are still starting
      address_ = std::string(absl::StripAsciiWhitespace(*text));
      for (size_t i = 0; i < workers_.size(); ++i) {
        s = start_worker(i);
        if (!s.ok()) break;
      }
      if (!s.ok()) break;
      std::cerr << "flywheel train: controller at " << address_ << "; " << c_.rollout.num_workers
                << " rollout worker(s)"
                << (mpmd_ ? absl::StrCat(" in the learners' mpirun (weights over ",
                                         core::choice_name(core::weight_transport(c_.weight_sync)),
                                         "; a worker that fails ends the job)")
                          : "")
                << ", logs in " << (fs::path(run_dir_) / "logs").string() << "\n";
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      int status = 0;
      if (workers_[i] && workers_[i]->poll(&status) && stop_requests == 0) {
        workers_[i].reset();
        worker_exited(i, status);
      }
      if (!workers_[i] && restart_at_[i] && Clock::now() >= *restart_at_[i]) {
        restart_at_[i].reset();
        s = start_worker(i);
        if (!s.ok()) break;
      }
    }
    if (!s.ok()) break;
    if (!failure && stop_requests == 0 && !address_.empty()) {
      failure = no_worker_left();
      if (failure) {
        std::cerr << "flywheel train: " << *failure;
        // The learners checkpoint and stop (the stop file), or are stopped by a signal.
        if (!core::write_file_atomically(stop_file_, "stop\n").ok()) learners_->signal(SIGTERM);
        ++stop_requests;
      }
    }
  }
  if (!learner_done) {
    learners_->signal(SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!learners_->poll(&learner_status)) {
      if (Clock::now() > deadline) learners_->signal(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  stop_workers();
  fs::remove(stop_file_, ec);
  if (!s.ok()) return s;
  if (failure) return absl::AbortedError(*failure);
  const bool ok = WIFEXITED(learner_status) && WEXITSTATUS(learner_status) == 0;
  plot();
  if (!ok) {
    return absl::InternalError(
        absl::StrCat("the learner job ended with ", describe_exit(learner_status)));
  }
  std::cerr << "flywheel train: done; metrics, checkpoints and the exported model are in "
            << run_dir_ << " (resume with: flywheel train --resume " << run_dir_ << ")\n";
  return absl::OkStatus();
}

}  // namespace flywheel::launcher
