#include "flywheel/core/config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "constraint_checker.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, Config& c) {
  b.section("model", &c.model, "The policy, reference and critic checkpoints.");
  b.section("tokenizer", &c.tokenizer, "Tokenizer and chat template.");
  b.section("data", &c.data, "The prompt dataset, handed out by the controller under leases.");
  b.section("rollout", &c.rollout, "Generation engine and rollout workers.");
  b.section("algorithm", &c.algorithm,
            "Algorithm preset and its components: advantages, policy loss, KL, IS correction.");
  b.section("rewards", &c.rewards, "Reward functions.");
  b.section("environment", &c.environment, "Multi-turn environment (agentic episodes).");
  b.section("trainer", &c.trainer, "Learner optimisation.");
  b.section("sft", &c.sft, "Supervised fine-tuning (flywheel sft).");
  b.section("dpo", &c.dpo, "Preference optimisation (flywheel dpo).");
  b.section("rm", &c.rm, "Reward-model training (flywheel rm).");
  b.section("distill", &c.distill, "On-policy distillation from a teacher (flywheel train).");
  b.section("eval", &c.eval, "Held-out evaluation during RL training and `flywheel eval`.");
  b.section("buffer", &c.buffer,
            "The controller: trajectory buffer, staleness budget, prompt leases, gRPC server.");
  b.section("cluster", &c.cluster, "Processes, threads and collective backends.");
  b.section("weight_sync", &c.weight_sync, "Weight broadcast from learners to rollout workers.");
  b.section("checkpoint", &c.checkpoint, "Checkpoints and resume.");
  b.section("logging", &c.logging, "Log level, run directory and metrics sinks.");
  b.field(
      "plugins", &c.plugins,
      FieldInfo("Shared libraries (.so) loaded at startup; each registers its components "
                "through flywheel_register_plugin. A path with a '/' is relative to the "
                "config file that names it; a bare file name is searched like dlopen(3) does."));
}

namespace {

void add_section_issue(absl::string_view section, const absl::Status& status,
                       std::vector<ConfigIssue>* issues) {
  if (status.ok()) return;
  std::string message(status.message());
  // Sections report "key: problem" relative to themselves.
  size_t colon = message.find(": ");
  if (colon == std::string::npos) {
    issues->push_back({std::string(section), message});
    return;
  }
  issues->push_back({join_key_path(section, message.substr(0, colon)), message.substr(colon + 2)});
}

}  // namespace

std::vector<ConfigIssue> collect_config_issues(const Config& config) {
  Config copy = config;
  ConstraintChecker checker;
  bind_options(checker, copy);
  std::vector<ConfigIssue> issues = checker.issues();

  add_section_issue("model", config.model.validate(), &issues);
  add_section_issue("rollout", config.rollout.validate(), &issues);
  add_section_issue("algorithm", config.algorithm.validate(), &issues);
  add_section_issue("rewards", config.rewards.validate(), &issues);
  add_section_issue("trainer", config.trainer.validate(), &issues);
  add_section_issue("buffer", config.buffer.validate(), &issues);
  add_section_issue("logging", config.logging.validate(), &issues);
  // Weights published every k steps make rollout tokens up to k - 1 versions old on their own.
  if (config.weight_sync.every_steps - 1 > config.buffer.max_staleness) {
    issues.push_back(
        {"weight_sync.every_steps",
         absl::StrCat("publishing every ", config.weight_sync.every_steps,
                      " steps makes rollouts up to ", config.weight_sync.every_steps - 1,
                      " versions old: buffer.max_staleness (", config.buffer.max_staleness,
                      ") must be at least that")});
  }
  // The learners pack whole sequences into micro-batches: a sequence the controller accepts must
  // fit in one.
  if (config.trainer.micro_batch_tokens < config.model.max_seq_len) {
    issues.push_back(
        {"trainer.micro_batch_tokens",
         absl::StrCat(config.trainer.micro_batch_tokens,
                      " tokens cannot hold one sequence of "
                      "model.max_seq_len (",
                      config.model.max_seq_len, ") tokens; raise it or lower model.max_seq_len")});
  }
  if (!config.buffer.filter_metric.empty()) {
    const std::string& metric = config.buffer.filter_metric;
    std::vector<std::string> labels;
    for (const RewardFunctionOptions& f : config.rewards.functions) {
      labels.push_back(f.label.empty() ? f.name : f.label);
    }
    if (std::find(labels.begin(), labels.end(), metric) == labels.end()) {
      issues.push_back(
          {"buffer.filter_metric",
           absl::StrCat("'", metric, "' names no reward function of rewards.functions (labels: ",
                        labels.empty() ? "none" : absl::StrJoin(labels, ", "), ")")});
    }
  }
  if (config.rollout.agent.enabled() && !config.environment.name.empty()) {
    issues.push_back({"rollout.agent.command",
                      "an agent and environment.name cannot both drive episodes; set one"});
  }
  for (size_t i = 0; i < config.plugins.size(); ++i) {
    if (config.plugins[i].empty()) {
      issues.push_back({absl::StrCat("plugins[", i, "]"), "must not be empty"});
    }
  }
  return issues;
}

absl::Status Config::validate() const {
  std::vector<ConfigIssue> issues = collect_config_issues(*this);
  if (issues.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrJoin(issues, "\n", [](std::string* out, const ConfigIssue& issue) {
        absl::StrAppend(out, issue.path, ": ", issue.message);
      }));
}

}  // namespace flywheel::core
