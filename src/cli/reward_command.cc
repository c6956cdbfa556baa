// `flywheel reward CONFIG -i completions.jsonl -o scores.jsonl`: scores {"prompt", "completion",
// ...metadata} records offline with the configured reward functions, through the same scoring
// pool (threads, timeouts, fallbacks) as the rollout workers, and prints a summary.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rewards/scoring_pool.h"

namespace flywheel::cli {
namespace {

struct RewardArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string input = "-";
  std::string output = "-";
  std::string tokenizer_dir;
  int64_t batch = 256;
};

// Running means of the total and of every part, and the counts of the summary.
struct Summary {
  int64_t records = 0;
  int64_t invalid = 0;
  int64_t with_errors = 0;
  double reward_sum = 0;
  std::map<std::string, std::pair<double, int64_t>> parts;  // sum, count

  void add(const rewards::ScoredSample& s) {
    ++records;
    reward_sum += s.reward;
    if (!s.errors.empty()) ++with_errors;
    for (const auto& [name, value] : s.parts) {
      parts[name].first += value;
      ++parts[name].second;
    }
  }
};

// The record as a sample: "completion" (required), "prompt", "completion_ids" (or the tokenizer's
// encoding of the completion), "truncated" or "finish_reason": "length".
absl::StatusOr<rewards::OwnedSample> to_sample(core::Json record, const std::string& where,
                                               const model::Tokenizer* tokenizer) {
  rewards::OwnedSample s;
  const core::Json* completion = record.find("completion");
  if (completion == nullptr || !completion->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": needs \"completion\": a string (the text to score)"));
  }
  s.completion = completion->as_string();
  if (const core::Json* prompt = record.find("prompt"); prompt && prompt->is_string()) {
    s.prompt = prompt->as_string();
  }
  if (const core::Json* ids = record.find("completion_ids")) {
    if (!ids->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": completion_ids must be a list"));
    }
    for (const core::Json& id : ids->as_array()) {
      if (!id.is_integer() || id.as_int() < 0 || id.as_int() > INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": completion_ids must be non-negative 32-bit integers"));
      }
      s.completion_ids.push_back(static_cast<int32_t>(id.as_int()));
    }
  } else if (tokenizer != nullptr) {
    model::EncodeOptions options;
    options.add_special_tokens = false;
    absl::StatusOr<std::vector<int64_t>> ids = tokenizer->encode(s.completion, options);
    if (!ids.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", ids.status().message()));
    }
    for (int64_t id : *ids) {
      if (id < 0 || id > INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the tokenizer gave token id ", id, ", outside int32"));
      }
      s.completion_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (const core::Json* t = record.find("truncated"); t && t->is_bool()) s.truncated = t->as_bool();
  if (const core::Json* f = record.find("finish_reason"); f && f->is_string()) {
    s.truncated = s.truncated || f->as_string() == "length";
  }
  s.record_name = where;
  s.record = std::make_shared<const core::Json>(std::move(record));
  return s;
}

core::Json scored_record(const rewards::OwnedSample& sample, const rewards::ScoredSample& scored) {
  core::Json out = *sample.record;
  out.set("reward", core::Json(scored.reward));
  core::Json parts = core::Json::object();
  for (const auto& [name, value] : scored.parts) parts.set(name, core::Json(value));
  out.set("rewards", std::move(parts));
  if (!scored.step_ends.empty()) {  // process rewards: where each step's reward is paid
    core::Json ends = core::Json::array(), rewards = core::Json::array();
    for (int32_t end : scored.step_ends) ends.push_back(core::Json(static_cast<int64_t>(end)));
    for (double r : scored.step_rewards) rewards.push_back(core::Json(r));
    out.set("step_ends", std::move(ends));
    out.set("step_rewards", std::move(rewards));
  }
  if (!scored.errors.empty()) {
    core::Json errors = core::Json::array();
    for (const std::string& e : scored.errors) errors.push_back(core::Json(e));
    out.set("reward_errors", std::move(errors));
  }
  return out;
}

absl::Status run(const RewardArgs& args) {
  FLYWHEEL_ASSIGN_OR_RETURN(jobs::JobSetup job, jobs::set_up_job(args.config, args.overrides));
  const core::Config& config = job.loaded.config;
  if (config.rewards.functions.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        args.config, ": rewards.functions is empty: nothing to score (docs/rewards.md)"));
  }
  const std::string config_dir = std::filesystem::absolute(args.config).parent_path().string();
  auto composite = rewards::CompositeReward::create(config.rewards, *job.registry,
                                                    config.rollout.max_new_tokens, config_dir);
  if (!composite.ok()) return composite.status();
  std::unique_ptr<model::Tokenizer> tokenizer;
  if (!args.tokenizer_dir.empty()) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> loaded,
                              model::load_tokenizer(args.tokenizer_dir, "auto"));
    tokenizer = std::move(loaded);
  }
  auto pool = rewards::ScoringPool::create(
      *composite, rewards::ScoringPoolOptions::from_config(config.rewards));
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<core::JsonlReader>> in = core::JsonlReader::open(args.input);
  if (!in.ok()) return in.status();
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlWriter> out,
                            core::JsonlWriter::open(args.output));

  Summary summary;
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  bool more = true;
  while (more) {
    // One chunk: valid records are scored together; invalid lines keep their place as errors.
    std::vector<rewards::OwnedSample> chunk;
    std::vector<std::pair<size_t, core::Json>> invalid;  // position in the output, record
    size_t position = 0;
    while (static_cast<int64_t>(position) < args.batch) {
      absl::StatusOr<std::optional<core::Json>> line = (*in)->next();
      absl::Status bad = line.status();
      if (line.ok()) {
        if (!line->has_value()) {
          more = false;
          break;
        }
        absl::StatusOr<rewards::OwnedSample> sample =
            to_sample(std::move(**line), (*in)->where(), tokenizer.get());
        if (sample.ok()) {
          chunk.push_back(std::move(*sample));
          ++position;
          continue;
        }
        bad = sample.status();
      } else if (bad.code() != absl::StatusCode::kInvalidArgument) {
        return bad;  // a read error: the input ends
      }
      std::cerr << "flywheel reward: " << bad.message() << "\n";
      core::Json error = core::Json::object();
      error.set("error", core::Json(std::string(bad.message())));
      invalid.emplace_back(position++, std::move(error));
      ++summary.invalid;
    }
    std::vector<rewards::ScoredSample> scored = (*pool)->score(chunk);
    size_t next_valid = 0, next_invalid = 0;
    for (size_t p = 0; p < position; ++p) {
      if (next_invalid < invalid.size() && invalid[next_invalid].first == p) {
        out->write(invalid[next_invalid++].second);
        continue;
      }
      summary.add(scored[next_valid]);
      out->write(scored_record(chunk[next_valid], scored[next_valid]));
      ++next_valid;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_progress > std::chrono::seconds(5)) {
      last_progress = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::cerr << absl::StrFormat("flywheel reward: %d record(s) scored (%.1f/s)\n",
                                   summary.records, summary.records / s);
    }
  }
  absl::Status closed = out->close();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const rewards::ScoringCounters counters = (*pool)->counters();
  std::cerr << absl::StrFormat(
      "flywheel reward: %d record(s) in %.2f s (%.1f records/s, %d scoring thread(s))\n",
      summary.records, elapsed, summary.records / std::max(elapsed, 1e-9), config.rewards.workers);
  if (summary.records > 0) {
    std::cerr << absl::StrFormat("  reward: mean %.4f\n", summary.reward_sum / summary.records);
    for (const auto& [name, sum_count] : summary.parts) {
      std::cerr << absl::StrFormat("  %s: mean %.4f\n", name,
                                   sum_count.first / std::max<int64_t>(sum_count.second, 1));
    }
  }
  std::cerr << absl::StrFormat(
      "  errors: %d call(s) (%d record(s)); timeouts: %d; invalid lines: %d\n", counters.errors,
      summary.with_errors, counters.timeouts, summary.invalid);
  if (!closed.ok()) return closed;
  if (summary.invalid > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(summary.invalid, " invalid line(s), written as {\"error\": ...} records"));
  }
  return absl::OkStatus();
}

}  // namespace

void add_reward_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RewardArgs>();
  CLI::App* command = app.add_subcommand(
      "reward",
      "Score {\"prompt\", \"completion\", ...metadata} lines with the config's reward functions "
      "(rewards:) and print a summary; writes each record with \"reward\" and \"rewards\" (and a "
      "process reward's \"step_ends\" and \"step_rewards\")");
  command->add_option("config", args->config, "YAML config with a rewards: section")->required();
  command->add_option("-i,--input", args->input, "JSONL records ('-' = stdin)");
  command->add_option("-o,--output", args->output, "JSONL output ('-' = stdout)");
  command->add_option("--set", args->overrides, "Override a config key: --set key=value")
      ->allow_extra_args(false);  // one key=value per --set: a positional after it stays one
  command->add_option("--tokenizer", args->tokenizer_dir,
                      "Tokenizer directory, to count completion tokens for records without "
                      "\"completion_ids\" (length and repetition penalties)");
  command->add_option("--batch", args->batch, "Records scored together")
      ->check(CLI::Range(1, 1 << 20));
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel reward: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitFailure;
  });
}

}  // namespace flywheel::cli
