// `flywheel generate --model DIR [-i prompts.jsonl] [-o out.jsonl]`: completions with token ids,
// per-token behaviour log-probs and versions, through the rollout engine.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "choice_flag.h"
#include "commands.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/cpu_features.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/chat_messages.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"
#include "flywheel/rollout/completion_json.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/episode_runner.h"
#include "flywheel/rollout/remote_environment.h"
#include "flywheel/rollout/turn_markers.h"
#include "generate_input.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string input = "-";
  std::string output = "-";
  std::string chat_template = "auto";
  rollout::SamplingParams sampling;
  int64_t n = 1;
  int64_t max_slots = 16;
  int64_t max_seq_len = 2048;
  core::LogprobMode logprob_mode = core::LogprobMode::kTemperatureScaled;
  bool ignore_eos = false;
  bool skip_invalid = false;
  core::EnvironmentOptions environment;  // name set: every sample is an episode
  std::vector<std::string> environment_params;
};

absl::Status run(const GenerateArgs& args) {
  model::ThreadLayout layout;
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::DecoderModel> loaded, args.model.load(&layout));
  std::cerr << "flywheel generate: cpu: " << model::describe(model::detect_cpu_features()) << "; "
            << layout.to_string() << "\n";
  std::shared_ptr<model::DecoderModel> model(loaded.release());
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> loaded_tokenizer,
                            model::load_tokenizer_if_present(args.model.dir));
  std::unique_ptr<model::Tokenizer> tokenizer = std::move(loaded_tokenizer);
  if (!tokenizer && !args.sampling.stop_strings.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stop strings need a tokenizer (tokenizer.json or char_tokenizer.json) in ",
                     args.model.dir, "; this model has none"));
  }

  rollout::SamplingParams sampling = args.sampling;
  if (!args.ignore_eos) {
    for (int64_t id : model::generation_eos_ids(model->config(), args.model.dir))
      sampling.stop_token_ids.push_back(id);
  }
  core::PluginRegistry registry;
  FLYWHEEL_RETURN_IF_ERROR(rollout::register_rollout_builtins(registry));
  FLYWHEEL_RETURN_IF_ERROR(rollout::register_remote_environment(registry));
  rollout::EngineOptions options;
  options.max_slots = std::max(args.max_slots, args.n);
  options.max_seq_len = args.max_seq_len;
  options.logprob_mode = args.logprob_mode;
  rollout::EngineContext context;
  context.tokenizer = tokenizer.get();
  context.registry = &registry;
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<rollout::GenerationEngine> engine,
                            rollout::GenerationEngine::create(model, options, context));
  std::unique_ptr<rollout::EpisodeRunner> runner;
  if (!args.environment.name.empty()) {
    core::EnvironmentOptions environment = args.environment;
    FLYWHEEL_RETURN_IF_ERROR(
        parse_params(args.environment_params, "--env-param", &environment.params));
    FLYWHEEL_ASSIGN_OR_RETURN(std::shared_ptr<const rollout::Environment> env,
                              rollout::make_environment(environment, registry, "."));
    rollout::TurnMarkerIds markers;  // the chat template's, when the model has one
    if (auto chat = model::ChatTemplate::resolve(args.chat_template, args.model.dir); chat.ok()) {
      model::TokenizerSetup setup{args.model.dir, std::move(tokenizer), *chat};
      FLYWHEEL_ASSIGN_OR_RETURN(markers, rollout::turn_marker_ids(setup));
      tokenizer = std::move(setup.tokenizer);
    }
    runner = std::make_unique<rollout::EpisodeRunner>(
        engine.get(), env, tokenizer.get(),
        rollout::EpisodeOptions::from_config(environment, std::move(markers)));
  }

  // Every line is read and validated (submitted: queued, nothing generated yet) before any
  // generation, so that all bad lines are reported at once.
  absl::StatusOr<std::unique_ptr<core::JsonlReader>> in = core::JsonlReader::open(args.input);
  if (!in.ok()) return in.status();
  std::vector<InputLine> lines;
  std::optional<model::ChatTemplate> chat_template;
  int64_t invalid = 0;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> next = (*in)->next();
    InputLine line;
    line.where = (*in)->where();
    if (!next.ok()) {
      // A malformed line is reported with the others; a failing read ends the input.
      if (next.status().code() != absl::StatusCode::kInvalidArgument) return next.status();
      line.error = std::string(next.status().message());
    } else if (!next->has_value()) {
      break;
    } else {
      line.record = std::move(**next);
      absl::StatusOr<std::vector<int64_t>> ids =
          prompt_ids(*line.record, line.where, tokenizer.get(),
                     {args.model.dir, args.chat_template}, &chat_template);
      absl::Status submitted = ids.status();
      if (ids.ok()) {
        rollout::EpisodeRequest request;  // or a GenerationRequest: the same fields
        request.id = std::to_string(lines.size());
        request.prompt_ids = *ids;
        request.sampling = sampling;
        request.sampling.seed = args.sampling.seed + lines.size();
        request.n = args.n;
        if (runner) request.record = std::make_shared<core::Json>(*line.record);
        submitted = runner ? runner->submit(std::move(request))
                           : engine->submit({request.id, std::move(request.prompt_ids),
                                             request.sampling, request.n});
        core::Json list = core::Json::array();
        for (int64_t id : *ids) list.push_back(core::Json(id));
        line.record->set("prompt_ids", std::move(list));
      }
      if (!submitted.ok()) line.error = std::string(submitted.message());
    }
    if (!line.error.empty()) {
      const std::string prefix = line.where + ": ";  // some messages name the line already
      if (line.error.rfind(prefix, 0) == 0) line.error.erase(0, prefix.size());
      ++invalid;
      std::cerr << "flywheel generate: " << line.where << ": " << line.error << "\n";
    }
    lines.push_back(std::move(line));
  }
  if (invalid > 0 && !args.skip_invalid) {
    return absl::InvalidArgumentError(absl::StrCat(
        invalid, " of ", lines.size(),
        " input line(s) are invalid; nothing was generated (--skip-invalid generates the "
        "others and writes an \"error\" record for each invalid line)"));
  }

  std::vector<std::optional<rollout::GroupResult>> results(lines.size());
  std::vector<rollout::EpisodeGroup> episodes(lines.size());
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  size_t done = 0;
  const size_t valid = lines.size() - invalid;
  while (runner ? !runner->idle() : !engine->idle()) {
    if (runner) {  // the runner takes the engine's finished groups itself
      runner->step();
      for (rollout::EpisodeGroup& g : runner->take_finished()) {
        episodes[std::stoul(g.request_id)] = std::move(g);
        ++done;
      }
    } else {
      engine->step();
      for (rollout::GroupResult& r : engine->take_finished()) {
        results[std::stoul(r.request_id)] = std::move(r);
        ++done;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(5)) {
      double elapsed = std::chrono::duration<double>(now - start).count();
      std::cerr << absl::StrFormat("flywheel generate: %d/%d prompts, %d tokens, %.1f tokens/s\n",
                                   done, valid, engine->stats().generated_tokens,
                                   engine->stats().generated_tokens / elapsed);
      last_report = now;
    }
  }

  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlWriter> out,
                            core::JsonlWriter::open(args.output));
  for (size_t i = 0; i < lines.size(); ++i) {
    InputLine& line = lines[i];
    core::Json record = line.record ? std::move(*line.record) : core::Json::object();
    if (!line.error.empty()) {
      record.set("error", core::Json(absl::StrCat(line.where, ": ", line.error)));
      out->write(record);
      continue;
    }
    core::Json completions = core::Json::array();
    const size_t n = runner ? episodes[i].episodes.size() : results[i]->samples.size();
    for (size_t k = 0; k < n; ++k) {
      const rollout::Episode* episode = runner ? &episodes[i].episodes[k] : nullptr;
      const rollout::Sample& sample = episode ? episode->sample : results[i]->samples[k];
      completions.push_back(rollout::completion_json(sample, episode, tokenizer.get()));
    }
    record.set("completions", std::move(completions));
    out->write(record);
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << absl::StrFormat(
      "flywheel generate: %d prompt(s), %d token(s) in %.3f s (%.1f tokens/s)%s\n", valid,
      engine->stats().generated_tokens, elapsed,
      engine->stats().generated_tokens / std::max(elapsed, 1e-9),
      invalid > 0 ? absl::StrCat("; ", invalid, " invalid line(s) skipped") : "");
  return out->close();
}

}  // namespace

void add_generate_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* command = app.add_subcommand(
      "generate",
      "Generate completions for {\"prompt\": ...}, {\"messages\": [...]} or {\"prompt_ids\": "
      "[...]} lines with the rollout engine; writes token ids, per-token log-probs and versions");
  args->model.add_to(command);
  command->add_option("-i,--input", args->input, "JSONL prompts ('-' = stdin)");
  command->add_option("-o,--output", args->output, "JSONL output ('-' = stdout)");
  command->add_option("-n", args->n, "Samples per prompt")->check(CLI::Range(1, 1024));
  command->add_option("--max-new-tokens", args->sampling.max_new_tokens, "Tokens per completion")
      ->check(CLI::Range(1, 1 << 20));
  command->add_option("--temperature", args->sampling.temperature, "0 = greedy")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--top-k", args->sampling.top_k, "0 = off")->check(CLI::NonNegativeNumber);
  command->add_option("--top-p", args->sampling.top_p, "1 = off")->check(CLI::Range(0.0, 1.0));
  command->add_option("--min-p", args->sampling.min_p, "0 = off")->check(CLI::Range(0.0, 1.0));
  command->add_option("--seed", args->sampling.seed, "Seed of line 0; line i uses seed + i");
  command->add_option("--stop", args->sampling.stop_strings,
                      "Stop string (repeatable; needs the model's tokenizer)");
  command->add_flag(
      "--skip-invalid", args->skip_invalid,
      "Generate the valid lines and write {..., \"error\": \"path:line: why\"} for each "
      "invalid one (default: report every invalid line and generate nothing, exit 2)");
  command->add_flag("--ignore-eos", args->ignore_eos,
                    "Do not stop at the eos ids of config.json / generation_config.json");
  command->add_option("--max-slots", args->max_slots, "Concurrent sequences (KV-cache slots)")
      ->check(CLI::Range(1, 4096));
  command->add_option("--max-seq-len", args->max_seq_len, "Prompt + completion tokens")
      ->check(CLI::Range(2, 1 << 20));
  command
      ->add_option("--chat-template", args->chat_template,
                   "Template for messages: auto, chatml, qwen3 or llama3")
      ->check(CLI::IsMember({"auto", "chatml", "qwen3", "llama3"}));
  command->add_option("--environment", args->environment.name,
                      "Run every sample as a multi-turn episode with this environment "
                      "(calculator, guess_number or a plugin's); writes each token's source "
                      "and turn");
  command->add_option("--env-param", args->environment_params,
                      "key=value of environment.params (repeatable)");
  command->add_option("--max-turns", args->environment.max_turns, "Model turns per episode")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  command
      ->add_option("--turn-max-new-tokens", args->environment.turn_max_new_tokens,
                   "Tokens of one model turn (0: only --max-new-tokens, the episode's budget)")
      ->check(CLI::NonNegativeNumber);
  add_choice_flag(command, "--logprob-mode", &args->logprob_mode,
                  "temperature_scaled (what the learner recomputes) or processed (the "
                  "truncated distribution actually sampled)");
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel generate: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
