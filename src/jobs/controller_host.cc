#include "flywheel/jobs/controller_host.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/algos/algorithm.h"
#include "flywheel/algos/dapo.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/hf_checkpoint.h"

namespace flywheel::jobs {
namespace {

// The address workers should dial: a wildcard bind address is replaced by this host's name.
std::string dial_address(const std::string& bind_address, int port) {
  std::string host = bind_address.substr(0, bind_address.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "127.0.0.1";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<ControllerSetup> prepare_controller(const JobSetup& job,
                                                   const model::ModelConfig& model,
                                                   const std::string& who) {
  const core::Config& c = job.loaded.config;
  if (c.data.train_path.empty()) return absl::InvalidArgumentError("data.train_path must be set");
  ControllerSetup setup;
  FLYWHEEL_ASSIGN_OR_RETURN(
      std::unique_ptr<buffer::PromptDataset> data,
      buffer::PromptDataset::load(c.data.train_path, c.data.prompt_key, c.data.messages_key));
  setup.dataset = std::move(data);

  buffer::ControllerOptions& o = setup.options;
  o.num_prompts = setup.dataset->size();
  o.epochs = c.data.epochs;
  o.shuffle = c.data.shuffle;
  o.seed = static_cast<uint64_t>(c.data.seed);
  o.groups_per_step = c.trainer.groups_per_step;
  o.max_staleness = c.buffer.max_staleness;
  o.requeue_stale = c.buffer.stale_policy == core::StalePolicy::kRequeue;
  o.freshest_first = c.buffer.sampling == core::BufferSampling::kFreshest;
  o.capacity_groups = c.buffer.capacity_groups;
  o.capacity_bytes = c.buffer.capacity_bytes;
  o.lease_timeout_s = c.buffer.lease_timeout_s;
  o.worker_timeout_s = c.buffer.heartbeat_interval_s * c.buffer.missed_heartbeats;
  o.limits.vocab_size = model.vocab_size;
  if (model.num_moe_layers() > 0) {
    o.limits.route_layers = model.num_moe_layers();
    o.limits.route_k = model.num_experts_per_tok;
    o.limits.num_experts = model.num_experts;
  }
  o.limits.group_size = c.rollout.group_size;
  if (c.rollout.agent.enabled() && c.rollout.agent.on_rewrite == core::OnRewrite::kSegment) {
    o.limits.max_segments = c.rollout.agent.max_segments;  // an episode's streams (agents)
  }
  // A sequence must fit the context and one learner micro-batch (config validation checks the
  // second holds whatever the context; this keeps the learners safe from any other client).
  o.limits.max_tokens = std::min(c.model.max_seq_len, c.trainer.micro_batch_tokens);
  o.incarnation = buffer::make_incarnation();
  o.max_groups = c.trainer.total_steps * c.trainer.groups_per_step;
  o.limits.max_group_bytes = c.buffer.server.max_message_bytes;
  o.dataset_fingerprint = setup.dataset->fingerprint();
  FLYWHEEL_ASSIGN_OR_RETURN(bool baseline, algos::needs_greedy_baseline(c, *job.registry));
  o.limits.require_baseline = baseline;

  if (!c.buffer.filter.empty()) {
    auto created = job.registry->get<algos::GroupFilter, const algos::GroupFilterParams&>().create(
        c.buffer.filter, {});
    if (!created.ok()) return created.status();
    std::shared_ptr<algos::GroupFilter> shared = std::move(*created);
    setup.filter = [shared](const std::vector<double>& rewards) { return shared->keep(rewards); };
  }
  o.filter_metric = c.buffer.filter_metric;

  buffer::ControllerServerOptions& so = setup.server;
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
  } else if (!absl::StartsWith(so.bind_address, "127.0.0.1:") &&
             !absl::StartsWith(so.bind_address, "localhost:") &&
             !absl::StartsWith(so.bind_address, "[::1]:")) {
    // Beyond loopback anyone who reaches the port could push trajectories.
    std::cerr << who << ": no token in $" << c.buffer.server.auth_token_env
              << "; clients are not authenticated\n";
  }
  for (auto [path, pem] : {std::pair{&c.buffer.server.tls_cert, &so.tls_cert_pem},
                           std::pair{&c.buffer.server.tls_key, &so.tls_key_pem},
                           std::pair{&c.buffer.server.tls_client_ca, &so.tls_client_ca_pem}}) {
    if (path->empty()) continue;
    FLYWHEEL_ASSIGN_OR_RETURN(std::string text, core::read_file(*path));
    *pem = text;
  }
  return setup;
}

absl::StatusOr<std::unique_ptr<buffer::ControllerCore>> make_controller_core(
    const ControllerSetup& setup, const std::string& snapshot) {
  if (snapshot.empty()) return buffer::ControllerCore::create(setup.options, setup.filter);
  // Restored lease deadlines count from now on the clock the server then runs on.
  return buffer::ControllerCore::restore(
      setup.options, snapshot, buffer::ControllerServer::monotonic_seconds(), setup.filter);
}

absl::StatusOr<buffer::ControllerClientOptions> controller_client_options(
    const core::Config& config, const std::string& address, const std::string& worker_id) {
  buffer::ControllerClientOptions o;
  o.address = address;
  o.worker_id = worker_id;
  o.deadline_s = config.buffer.server.rpc_deadline_s;
  o.reconnect_timeout_s = config.buffer.server.reconnect_timeout_s;
  o.max_message_bytes = config.buffer.server.max_message_bytes;
  const core::ServerOptions& server = config.buffer.server;
  absl::StatusOr<std::string> token =
      buffer::read_token(server.auth_token_file, server.auth_token_env);
  if (token.ok()) {
    o.token = *token;
  } else if (!server.auth_token_file.empty()) {
    return token.status();
  }
  if (!server.tls_cert.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::string pem, core::read_file(server.tls_cert));
    o.tls_root_ca_pem = pem;
  }
  o.weight_deltas = core::wants_weight_deltas(config.weight_sync, address);
  return o;
}

absl::StatusOr<std::unique_ptr<ControllerHost>> start_controller(const JobSetup& job,
                                                                 const model::ModelConfig& model,
                                                                 at::ScalarType weights_dtype,
                                                                 int64_t version,
                                                                 const std::string& snapshot) {
  const core::Config& c = job.loaded.config;
  auto host = std::make_unique<ControllerHost>();
  FLYWHEEL_ASSIGN_OR_RETURN(ControllerSetup setup,
                            prepare_controller(job, model, "flywheel learner"));
  host->setup = std::move(setup);
  host->setup.server.weights_dtype = model::dtype_name(weights_dtype);
  auto core = make_controller_core(host->setup, snapshot);
  if (!core.ok()) return core.status();
  host->core = std::move(*core);
  host->core->set_version(version);
  if (!snapshot.empty()) {
    const int64_t released = host->core->release_all();
    if (released > 0)
      FLYWHEEL_LOG_INFO("re-issuing %d prompts leased before the restart", released);
  }
  const core::WeightSyncOptions& sync = c.weight_sync;
  host->weights = std::make_unique<buffer::WeightStore>(
      /*keep_versions=*/2,
      buffer::DeltaCodecOptions{
          sync.delta == core::WeightDelta::kOff ? 0 : static_cast<int>(sync.delta_level),
          static_cast<int>(sync.delta_threads)});
  auto server = buffer::ControllerServer::start(host->core.get(), host->setup.dataset.get(),
                                                host->setup.server, nullptr, host->weights.get());
  if (!server.ok()) return server.status();
  host->server = std::move(*server);
  host->address = dial_address(c.buffer.server.bind_address, host->server->port());
  return host;
}

void ControllerHost::stepped(
    int64_t step, const std::function<void(const std::string&, double, int64_t)>& log) const {
  core->set_version(step);
  for (const auto& [name, value] : core->counters().entries()) {
    log("buffer/" + name, static_cast<double>(value), step);
  }
  const buffer::WeightStore::AckCounters acks = weights->ack_counters();
  log("weight_sync/acks", static_cast<double>(acks.acks), step);
  log("weight_sync/checksum_mismatches", static_cast<double>(acks.mismatches), step);
  log("weight_sync/acks_rejected", static_cast<double>(acks.rejected), step);
  const buffer::WeightStore::DeltaCounters deltas = weights->delta_counters();
  if (deltas.encoded > 0) {  // weight_sync.delta: what the deltas weigh against whole versions
    log("weight_sync/deltas_encoded", static_cast<double>(deltas.encoded), step);
    log("weight_sync/delta_ratio", static_cast<double>(deltas.bytes) / deltas.full_bytes, step);
    log("weight_sync/delta_encode_s", deltas.encode_s / deltas.encoded, step);
  }
}

std::string ControllerHost::lost_summary() const {
  const buffer::ControllerCounters counters = core->counters();
  if (counters.dropped == 0 && counters.rejected_invalid == 0) return "";
  return absl::StrFormat(
      "; %d prompts dropped and %d groups rejected as invalid (see the rollout logs)",
      counters.dropped, counters.rejected_invalid);
}

}  // namespace flywheel::jobs
