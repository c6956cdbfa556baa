// Issue 26, item 2: no documented key of the RL run's sections (algorithm, rollout, trainer,
// buffer, cluster) may be parsed and then read by nothing. Each key is listed with the source
// file and the exact code through which the run takes it; the test fails when the schema has a
// key this list does not (a new key that nothing reads yet), when the list names a key the
// schema lost, and when a listed read is no longer in its file (the code that used the key was
// removed or rewritten without it). Keys whose effect is also tested by behaviour name that
// test in `tested_by` (e.g. the overlong penalty and the KL in the reward).
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/core/config_loader.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

struct Reader {
  const char* key;
  const char* file;  // relative to the source tree
  const char* code;  // appears in `file`, on one line
  const char* tested_by = "";
};

// clang-format off
const Reader kReaders[] = {
  {"rollout.num_workers", "src/launcher/launcher.cc", "request.workers = c_.rollout.num_workers;"},
  {"rollout.group_size", "src/jobs/controller_host.cc", "o.limits.group_size = c.rollout.group_size;"},
  {"rollout.max_new_tokens", "src/rollout/engine_config.cc", "p.max_new_tokens = r.max_new_tokens;"},
  {"rollout.temperature", "src/rollout/engine_config.cc", "p.temperature = r.temperature;"},
  {"rollout.top_k", "src/rollout/engine_config.cc", "p.top_k = r.top_k;"},
  {"rollout.top_p", "src/rollout/engine_config.cc", "p.top_p = r.top_p;"},
  {"rollout.min_p", "src/rollout/engine_config.cc", "p.min_p = r.min_p;"},
  {"rollout.stop", "src/rollout/engine_config.cc", "p.stop_strings = r.stop;"},
  {"rollout.max_slots", "src/rollout/engine_config.cc", "o.max_slots = r.max_slots;"},
  {"rollout.seed", "src/rollout/engine_config.cc", "p.seed = static_cast<uint64_t>(r.seed);"},
  {"rollout.weight_update", "src/rollout/engine_config.cc", "o.drain_before_update = r.weight_update == core::WeightUpdate::kDrain;"},
  {"rollout.recompute_kv_on_update", "src/rollout/engine_config.cc", "o.recompute_kv_on_update = r.recompute_kv_on_update;"},
  {"rollout.logprob_mode", "src/rollout/engine_config.cc", "o.logprob_mode = r.logprob_mode;"},
  {"rollout.max_prefill_tokens", "src/rollout/engine_config.cc", "o.max_prefill_tokens = r.max_prefill_tokens;"},
  {"rollout.finish_on_stop_s", "src/jobs/rollout_job.cc", "options_.finish_on_stop_s = c_.rollout.finish_on_stop_s;", "RolloutWorkerTest.AStoppedWorkersSamplesAreContinuedByAnother"},
  {"rollout.agent.command", "src/rollout/agent/agent_runner.cc", "process.command = options_.agent.command;", "AgentRunnerTest.AnAgentOverHttpIsRecordedAsOneExactTokenStream"},
  {"rollout.agent.mode", "src/rollout/agent/agent_runner.cc", "const bool persistent = options_.agent.mode == core::AgentMode::kPersistent;", "AgentRunnerTest.PersistentAgentsRunEpisodeAfterEpisode"},
  {"rollout.agent.host", "src/rollout/agent/agent_runner.cc", "server.host = options.agent.host;"},
  {"rollout.agent.port", "src/rollout/agent/agent_runner.cc", "server.port = static_cast<int>(options.agent.port);"},
  {"rollout.agent.timeout_s", "src/rollout/agent/agent_runner.cc", "now - run->started > std::chrono::duration<double>(options_.agent.timeout_s)"},
  {"rollout.agent.max_episodes", "src/jobs/agent_setup.cc", "worker->max_slots = std::min(worker->max_slots, c.rollout.agent.max_episodes);"},
  {"rollout.agent.on_rewrite", "src/rollout/agent/agent_runner.cc", "stream.drop_on_rewrite = options_.agent.on_rewrite == core::OnRewrite::kDrop;", "AgentRunnerTest.ARewrittenHistoryStartsASegment"},
  {"rollout.agent.max_segments", "src/rollout/agent/agent_runner.cc", "stream.max_segments = options_.agent.max_segments;", "EpisodeStreamTest.ARetryDiscardsTheReplyAndARewriteStartsASegment"},
  {"rollout.agent.tool_format", "src/rollout/agent/agent_runner.cc", "std::make_unique<agent::ChatFormat>(tokenizers.chat_template, options.agent.tool_format);", "AgentChatFormatTest.TagsWithoutATemplate"},
  {"rollout.agent.request_sampling", "src/rollout/agent/agent_runner_calls.cc", "if (options_.agent.request_sampling) {"},
  {"rollout.agent.max_request_bytes", "src/rollout/agent/agent_runner.cc", "server.max_request_bytes = options.agent.max_request_bytes;", "AgentRunnerTest.AnAgentOverHttpIsRecordedAsOneExactTokenStream"},
  {"rollout.agent.max_queued_requests", "src/rollout/agent/agent_runner.cc", "self->options_.agent.max_queued_requests;"},
  {"algorithm.name", "src/algos/presets.cc", "auto it = presets().find(config.algorithm.name);"},
  {"algorithm.advantage_estimator", "src/algos/algorithm.cc", "create(a.advantage_estimator, e);"},
  {"algorithm.policy_loss", "src/algos/algorithm.cc", "create(a.policy_loss, p);"},
  {"algorithm.loss_agg_mode", "src/algos/algorithm.cc", "parse_agg_mode(a.loss_agg_mode);"},
  {"algorithm.is_correction", "src/algos/algorithm.cc", "create(a.is_correction, is);"},
  {"algorithm.clip_low", "src/algos/algorithm.cc", "p.clip_low = a.clip_low;"},
  {"algorithm.clip_high", "src/algos/algorithm.cc", "p.clip_high = a.clip_high;"},
  {"algorithm.clip_c", "src/algos/algorithm.cc", "p.clip_c = a.clip_c;"},
  {"algorithm.kl_estimator", "src/algos/algorithm.cc", "parse_kl_estimator(a.kl_estimator);"},
  {"algorithm.kl_coef", "src/trainer/learner_options.cc", "o.kl_coef = a.kl_coef;", "LearnerShapingTest.KlInTheRewardShapesGroupAdvantagesAndTheUpdate"},
  {"algorithm.kl_in_reward", "src/trainer/learner_options.cc", "o.kl_in_reward = a.kl_in_reward;", "LearnerShapingTest.KlInTheRewardShapesGroupAdvantagesAndTheUpdate"},
  {"algorithm.entropy_coef", "src/trainer/learner_options.cc", "o.entropy_coef = a.entropy_coef;"},
  {"algorithm.gamma", "src/algos/algorithm.cc", "e.gamma = a.gamma;"},
  {"algorithm.lam", "src/algos/algorithm.cc", "e.lam = a.lam;"},
  {"algorithm.norm_by_std", "src/algos/algorithm.cc", "e.norm_by_std = a.norm_by_std;"},
  {"algorithm.grpo_eps", "src/algos/algorithm.cc", "e.eps = a.grpo_eps;"},
  {"algorithm.whiten_advantages", "src/algos/algorithm.cc", "e.whiten = a.whiten_advantages;"},
  {"algorithm.loss_agg_constant", "src/algos/algorithm.cc", "out.norm_constant = a.loss_agg_constant > 0 ? a.loss_agg_constant"},
  {"algorithm.kl_controller", "src/trainer/learner_options.cc", "o.adaptive_kl = a.kl_controller == core::KlController::kAdaptive;"},
  {"algorithm.kl_target", "src/trainer/learner_options.cc", "o.kl_target = a.kl_target;"},
  {"algorithm.kl_horizon", "src/trainer/learner_options.cc", "o.kl_horizon = a.kl_horizon;"},
  {"algorithm.is_low", "src/algos/algorithm.cc", "is.low = a.is_low;"},
  {"algorithm.is_high", "src/algos/algorithm.cc", "is.high = a.is_high;"},
  {"algorithm.value_clip", "src/trainer/learner_options.cc", "o.value_clip = a.value_clip;"},
  {"algorithm.overlong_buffer_len", "src/trainer/learner_options.cc", "o.overlong_buffer_len = a.overlong_buffer_len;", "LearnerShapingTest.OverlongResponsesArePenalisedByDaposFormula"},
  {"algorithm.overlong_penalty_factor", "src/trainer/learner_options.cc", "o.overlong_penalty_factor = a.overlong_penalty_factor;", "LearnerShapingTest.OverlongResponsesArePenalisedByDaposFormula"},
  {"algorithm.router_replay", "src/trainer/learner_options.cc", "o.router_replay = a.router_replay == \"r3\";", "RouteReplayTest.TheLearnerUsesTheEnginesRoutes"},
  {"trainer.total_steps", "src/jobs/controller_host.cc", "o.max_groups = c.trainer.total_steps * c.trainer.groups_per_step;"},
  {"trainer.groups_per_step", "src/jobs/controller_host.cc", "o.groups_per_step = c.trainer.groups_per_step;"},
  {"trainer.ppo_epochs", "src/trainer/learner_options.cc", "o.ppo_epochs = t.ppo_epochs;"},
  {"trainer.mini_batches", "src/trainer/learner_options.cc", "o.mini_batches = t.mini_batches;"},
  {"trainer.micro_batch_tokens", "src/trainer/optimizer_options.cc", "o.micro_batch_tokens = t.micro_batch_tokens;"},
  {"trainer.shared_prefix", "src/trainer/optimizer_options.cc", "o.shared_prefix = t.shared_prefix;", "LearnerTest.SharedPrefixesGiveTheUnsharedLossesAndUpdates"},
  {"trainer.exact_logprobs", "src/trainer/learner_options.cc", "o.exact_logprobs = t.exact_logprobs;", "ExactLogprobsTest.ProximalLogprobsEqualTheEnginesBitForBit"},
  {"trainer.lr", "src/trainer/optimizer_options.cc", "o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};"},
  {"trainer.lr_schedule", "src/trainer/optimizer_options.cc", "o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};"},
  {"trainer.warmup_steps", "src/trainer/optimizer_options.cc", "o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};"},
  {"trainer.min_lr_ratio", "src/trainer/optimizer_options.cc", "o.lr = {t.lr, t.lr_schedule, t.warmup_steps, t.total_steps, t.min_lr_ratio};"},
  {"trainer.weight_decay", "src/trainer/optimizer_options.cc", "o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};"},
  {"trainer.adam_beta1", "src/trainer/optimizer_options.cc", "o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};"},
  {"trainer.adam_beta2", "src/trainer/optimizer_options.cc", "o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};"},
  {"trainer.adam_eps", "src/trainer/optimizer_options.cc", "o.adamw = {t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};"},
  {"trainer.grad_clip", "src/trainer/optimizer_options.cc", "o.grad_clip = t.grad_clip;"},
  {"trainer.critic_lr", "src/trainer/learner_options.cc", "o.critic_lr = t.critic_lr;"},
  {"trainer.seed", "src/jobs/rl_learner_job.cc", "sources.seed = static_cast<uint64_t>(c_.trainer.seed);"},
  {"trainer.param_dtype", "src/trainer/sharded_decoder.cc", "model::resolve_dtype(t.param_dtype, /*on_cuda=*/false);"},
  {"trainer.reduce_dtype", "src/trainer/sharded_decoder.cc", "model::resolve_dtype(t.reduce_dtype, /*on_cuda=*/false);"},
  {"trainer.reshard_after_forward", "src/trainer/sharded_decoder.cc", "o.reshard_after_forward = t.reshard_after_forward;"},
  {"trainer.max_consecutive_skips", "src/trainer/optimizer_options.cc", "o.max_consecutive_skips = t.max_consecutive_skips;"},
  {"trainer.lora.rank", "src/model/lora.cc", "o.rank = lora.rank;"},
  {"trainer.lora.alpha", "src/model/lora.cc", "o.alpha = lora.alpha;"},
  {"trainer.lora.targets", "src/model/lora.cc", "o.targets = lora.targets;"},
  {"trainer.lora.merge_in_engine", "src/model/lora.cc", "o.merged = lora.merge_in_engine;"},
  {"trainer.lora.dropout", "src/trainer/sharded_decoder.cc", "o.lora.dropout = t.lora.dropout;"},
  {"trainer.no_progress_timeout_s", "src/jobs/rl_learner_job.cc", "o.no_progress_timeout_s = c_.trainer.no_progress_timeout_s;"},
  {"buffer.max_staleness", "src/jobs/controller_host.cc", "o.max_staleness = c.buffer.max_staleness;"},
  {"buffer.stale_policy", "src/jobs/controller_host.cc", "o.requeue_stale = c.buffer.stale_policy == core::StalePolicy::kRequeue;"},
  {"buffer.sampling", "src/jobs/controller_host.cc", "o.freshest_first = c.buffer.sampling == core::BufferSampling::kFreshest;"},
  {"buffer.capacity_groups", "src/jobs/controller_host.cc", "o.capacity_groups = c.buffer.capacity_groups;"},
  {"buffer.capacity_bytes", "src/jobs/controller_host.cc", "o.capacity_bytes = c.buffer.capacity_bytes;"},
  {"buffer.push_timeout_s", "src/jobs/controller_host.cc", "so.push_timeout_s = c.buffer.push_timeout_s;"},
  {"buffer.lease_timeout_s", "src/jobs/controller_host.cc", "o.lease_timeout_s = c.buffer.lease_timeout_s;"},
  {"buffer.heartbeat_interval_s", "src/jobs/controller_host.cc", "so.heartbeat_interval_s = c.buffer.heartbeat_interval_s;"},
  {"buffer.missed_heartbeats", "src/jobs/controller_host.cc", "o.worker_timeout_s = c.buffer.heartbeat_interval_s * c.buffer.missed_heartbeats;"},
  {"buffer.drain_timeout_s", "src/jobs/rl_learner_job.cc", "from_controller_->settle(c_.buffer.drain_timeout_s)"},
  {"buffer.filter", "src/jobs/controller_host.cc", "c.buffer.filter, {});"},
  {"buffer.filter_metric", "src/jobs/controller_host.cc", "o.filter_metric = c.buffer.filter_metric;"},
  {"buffer.server.bind_address", "src/jobs/controller_host.cc", "so.bind_address = c.buffer.server.bind_address;"},
  {"buffer.server.auth_token_file", "src/jobs/controller_host.cc", "buffer::read_token(c.buffer.server.auth_token_file, c.buffer.server.auth_token_env);"},
  {"buffer.server.auth_token_env", "src/jobs/controller_host.cc", "buffer::read_token(c.buffer.server.auth_token_file, c.buffer.server.auth_token_env);"},
  {"buffer.server.tls_cert", "src/jobs/controller_host.cc", "std::pair{&c.buffer.server.tls_cert, &so.tls_cert_pem}"},
  {"buffer.server.tls_key", "src/jobs/controller_host.cc", "std::pair{&c.buffer.server.tls_key, &so.tls_key_pem}"},
  {"buffer.server.tls_client_ca", "src/jobs/controller_host.cc", "std::pair{&c.buffer.server.tls_client_ca, &so.tls_client_ca_pem}"},
  {"buffer.server.max_message_bytes", "src/jobs/controller_host.cc", "so.max_message_bytes = c.buffer.server.max_message_bytes;"},
  {"buffer.server.transport_memory_bytes", "src/jobs/controller_host.cc", "so.transport_memory_bytes = c.buffer.server.transport_memory_bytes;"},
  {"buffer.server.rpc_deadline_s", "src/jobs/controller_host.cc", "o.deadline_s = config.buffer.server.rpc_deadline_s;", "ControllerServiceTest.APushHeldBackPastTheDeadlineIsPushedAgainNotFailed"},
  {"buffer.server.reconnect_timeout_s", "src/jobs/controller_host.cc", "o.reconnect_timeout_s = config.buffer.server.reconnect_timeout_s;", "integration.faults"},
  {"cluster.num_learners", "src/launcher/launcher.cc", "request.learners = c_.cluster.num_learners;"},
  {"cluster.controller_address", "src/jobs/rollout_job.cc", "if (address_.empty()) address_ = c_.cluster.controller_address;", "integration.faults"},
  {"cluster.threads_per_process", "src/jobs/rl_learner_job.cc", "at::set_num_threads(static_cast<int>(c_.cluster.threads_per_process));"},
  {"cluster.thread_split", "src/jobs/rollout_job.cc", "options.split = cluster.thread_split;"},
  {"cluster.backend", "src/comm/mpmd.cc", "c.cluster.backend == core::CommBackend::kNccl ||"},
  {"cluster.collective_timeout_s", "src/comm/mpmd.cc", "o.timeout_s = config.cluster.collective_timeout_s;"},
  {"cluster.max_worker_restarts", "src/launcher/launcher.cc", ": restarts_[i] >= c_.cluster.max_worker_restarts) {"},
};
// clang-format on

const char* const kAuditedSections[] = {"algorithm.", "rollout.", "trainer.", "buffer.",
                                        "cluster."};

// The schema's leaf keys under the audited sections (a path another path extends is a section).
std::set<std::string> documented_keys() {
  const std::vector<std::string> paths = all_config_key_paths();
  std::set<std::string> keys;
  for (const std::string& p : paths) {
    bool audited = false;
    for (const char* s : kAuditedSections) audited = audited || p.rfind(s, 0) == 0;
    const bool section = std::any_of(paths.begin(), paths.end(), [&](const std::string& q) {
      return q.size() > p.size() && q.compare(0, p.size() + 1, p + ".") == 0;
    });
    if (audited && !section) keys.insert(p);
  }
  return keys;
}

std::string source(const std::string& file) {
  std::ifstream in(std::string(FLYWHEEL_SOURCE_DIR) + "/" + file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ConfigAuditTest, EveryDocumentedRunKeyIsReadWhereItTakesEffect) {
  const std::set<std::string> documented = documented_keys();
  ASSERT_GT(documented.size(), 80u);  // the schema was read
  std::set<std::string> listed;
  std::map<std::string, std::string> files;
  for (const Reader& r : kReaders) {
    EXPECT_TRUE(listed.insert(r.key).second) << r.key << " is listed twice";
    EXPECT_TRUE(documented.count(r.key)) << r.key << " is listed but not in the schema";
    auto it = files.find(r.file);
    if (it == files.end()) it = files.emplace(r.file, source(r.file)).first;
    ASSERT_FALSE(it->second.empty()) << "cannot read " << r.file;
    EXPECT_NE(it->second.find(r.code), std::string::npos)
        << r.key << ": " << r.file << " no longer reads it as `" << r.code << "`";
  }
  for (const std::string& key : documented) {
    EXPECT_TRUE(listed.count(key))
        << key << " is documented and parsed, but nothing in this audit reads it: make the run "
        << "use it (and list where), or remove it from the schema";
  }
}

}  // namespace
}  // namespace flywheel::core
