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
#include "flywheel/algos/dapo.h"
#include "flywheel/buffer/controller_server.h"
#include "flywheel/core/file_io.h"
#include "flywheel/model/model_config.h"
#include "job_setup.h"

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

  absl::StatusOr<JobSetup> job = set_up_job(args.config_path, args.overrides);
  if (!job.ok()) return job.status();
  const core::Config& c = job->loaded.config;
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  absl::StatusOr<std::unique_ptr<buffer::PromptDataset>> data =
      buffer::PromptDataset::load(c.data.train_path, c.data.prompt_key, c.data.messages_key);
  if (!data.ok()) return data.status();
  if (c.model.path.empty()) {
    return absl::InvalidArgumentError("model.path must be set: its vocab_size bounds token ids");
  }
  absl::StatusOr<model::ModelConfig> model_config =
      model::ModelConfig::from_file((fs::path(c.model.path) / "config.json").string());
  if (!model_config.ok()) return model_config.status();

  buffer::ControllerOptions o;
  o.num_prompts = (*data)->size();
  o.epochs = c.data.epochs;
  o.shuffle = c.data.shuffle;
  o.seed = static_cast<uint64_t>(c.data.seed);
  o.groups_per_step = c.trainer.groups_per_step;
  o.max_staleness = c.buffer.max_staleness;
  o.requeue_stale = c.buffer.stale_policy == "requeue";
  o.freshest_first = c.buffer.sampling == "freshest";
  o.capacity_groups = c.buffer.capacity_groups;
  o.capacity_bytes = c.buffer.capacity_bytes;
  o.lease_timeout_s = c.buffer.lease_timeout_s;
  o.worker_timeout_s = c.buffer.heartbeat_interval_s * c.buffer.missed_heartbeats;
  o.limits.vocab_size = model_config->vocab_size;
  o.limits.group_size = c.rollout.group_size;
  o.limits.max_tokens = c.model.max_seq_len;
  o.limits.max_group_bytes = c.buffer.server.max_message_bytes;
  o.dataset_fingerprint = (*data)->fingerprint();

  buffer::ControllerCore::Filter filter;
  if (!c.buffer.filter.empty()) {
    auto created = job->registry->get<algos::GroupFilter, const algos::GroupFilterParams&>().create(
        c.buffer.filter, {});
    if (!created.ok()) return created.status();
    std::shared_ptr<algos::GroupFilter> shared = std::move(*created);
    filter = [shared](const std::vector<double>& rewards) { return shared->keep(rewards); };
  }
  std::unique_ptr<buffer::ControllerCore> core;
  std::error_code ec;
  if (!args.snapshot.empty() && fs::exists(args.snapshot, ec)) {
    // A snapshot holds every buffered group as JSON: far more than read_file's default limit.
    core::ReadFileOptions big;
    big.max_bytes = kMaxSnapshotBytes;
    absl::StatusOr<std::string> text = core::read_file(args.snapshot, big);
    if (!text.ok()) return text.status();
    // Restored lease deadlines count from now on the clock the server then runs on.
    auto restored = buffer::ControllerCore::restore(
        o, *text, buffer::ControllerServer::monotonic_seconds(), filter);
    if (!restored.ok()) return restored.status();
    core = std::move(*restored);
    std::cerr << "flywheel buffer: restored " << args.snapshot << " (version " << core->version()
              << ", " << core->buffered() << " buffered, " << core->in_flight() << " leased)\n";
  } else {
    auto created = buffer::ControllerCore::create(o, filter);
    if (!created.ok()) return created.status();
    core = std::move(*created);
  }

  buffer::ControllerServerOptions so;
  so.bind_address = c.buffer.server.bind_address;
  so.max_message_bytes = c.buffer.server.max_message_bytes;
  so.transport_memory_bytes = c.buffer.server.transport_memory_bytes;
  so.push_timeout_s = c.buffer.push_timeout_s;
  so.heartbeat_interval_s = c.buffer.heartbeat_interval_s;
  absl::StatusOr<std::string> token =
      buffer::read_token(c.buffer.server.auth_token_file, c.buffer.server.auth_token_env);
  if (token.ok()) {
    so.token = *token;
  } else if (!c.buffer.server.auth_token_file.empty()) {
    return token.status();
  } else {
    std::cerr << "flywheel buffer: no token in $" << c.buffer.server.auth_token_env
              << "; clients are not authenticated\n";
  }
  for (auto [path, pem] : {std::pair{&c.buffer.server.tls_cert, &so.tls_cert_pem},
                           std::pair{&c.buffer.server.tls_key, &so.tls_key_pem},
                           std::pair{&c.buffer.server.tls_client_ca, &so.tls_client_ca_pem}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> text = core::read_file(*path);
    if (!text.ok()) return text.status();
    *pem = *text;
  }
  auto server = buffer::ControllerServer::start(core.get(), data->get(), so,
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
    absl::Status written = core::write_file_atomically(args.snapshot, core->snapshot());
    if (!written.ok()) return written;
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
