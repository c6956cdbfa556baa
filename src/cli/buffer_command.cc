// `flywheel buffer CONFIG`: the controller (prompt leases, staleness-bounded trajectory buffer)
// as a standalone gRPC server, until SIGINT / SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/jobs/controller_host.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/model/model_config.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxSnapshotBytes = int64_t{64} << 30;

struct BufferArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string snapshot;  // restored at start when present, written at shutdown
};

absl::Status run(const BufferArgs& args) {
  // Signals are taken synchronously by this thread (sigwait), before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config_path, args.overrides));
  const core::Config& c = job.loaded.config;
  if (c.model.path.empty()) {
    return absl::InvalidArgumentError("model.path must be set: its vocab_size bounds token ids");
  }
  FLYWHEEL_ASSIGN_OR_RETURN(
      model::ModelConfig model_config,
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string()));
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::ControllerSetup setup,
                            jobs::prepare_controller(job, model_config, "flywheel buffer"));

  std::string snapshot;
  std::error_code ec;
  if (!args.snapshot.empty() && fs::exists(args.snapshot, ec)) {
    // A snapshot holds every buffered group as JSON: far more than read_file's default limit.
    core::ReadFileOptions big;
    big.max_bytes = kMaxSnapshotBytes;
    FLYWHEEL_ASSIGN_OR_RETURN(std::string text, core::read_file(args.snapshot, big));
    snapshot = std::move(text);
  }
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<buffer::ControllerCore> controller,
                            jobs::make_controller_core(setup, snapshot));
  if (!snapshot.empty()) {
    std::cerr << "flywheel buffer: restored " << args.snapshot << " (version "
              << controller->version() << ", " << controller->buffered() << " buffered, "
              << controller->in_flight() << " leased)\n";
  }
  auto server = buffer::ControllerServer::start(controller.get(), setup.dataset.get(), setup.server,
                                                &buffer::ControllerServer::monotonic_seconds);
  if (!server.ok()) return server.status();
  const std::string host =
      c.buffer.server.bind_address.substr(0, c.buffer.server.bind_address.rfind(':'));
  std::cout << "flywheel buffer: listening on " << host << ":" << (*server)->port() << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cerr << "flywheel buffer: stopping on signal " << signal_number << "\n";
  (*server)->shutdown();
  if (!args.snapshot.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(args.snapshot, controller->snapshot()));
    std::cerr << "flywheel buffer: wrote " << args.snapshot << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

void add_buffer_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BufferArgs>();
  CLI::App* command = app.add_subcommand(
      "buffer",
      "Run the controller (prompt leases, staleness-bounded trajectory buffer) as a "
      "standalone gRPC server until SIGINT/SIGTERM");
  command->add_option("config", args->config_path, "YAML config file")->required();
  command->add_option("--set", args->overrides, "Override a key (repeatable)")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->add_option("--snapshot", args->snapshot,
                      "Controller state file: restored at start if present, written on exit");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel buffer: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
