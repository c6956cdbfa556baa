#include "multi_turn_line.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "flywheel/core/json.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/environment.h"
#include "flywheel/rollout/episode_runner.h"

namespace flywheel::bench {
namespace {

constexpr int64_t kEpisodes = 32, kTurns = 4, kTurnTokens = 16, kReplyTokens = 8, kPrompt = 16;

// Answers every turn with the same kReplyTokens ids; the episode ends after kTurns turns.
class FixedReply : public rollout::Environment {
 public:
  absl::StatusOr<rollout::EpisodeStart> reset(const core::Json&) const override {
    return rollout::EpisodeStart{};
  }
  absl::StatusOr<rollout::EnvironmentStep> step(rollout::EpisodeState*,
                                                const rollout::ModelTurn& turn) const override {
    rollout::EnvironmentStep out;
    out.done = turn.index + 1 >= kTurns;
    for (int64_t i = 0; i < kReplyTokens; ++i) out.observation.token_ids.push_back(3 + i);
    return out;
  }
};

std::unique_ptr<rollout::GenerationEngine> make_engine(std::shared_ptr<model::DecoderModel> model) {
  rollout::EngineOptions options;
  options.max_slots = kEpisodes;
  options.max_seq_len = kPrompt + kTurns * (kTurnTokens + kReplyTokens) + 8;
  return std::move(*rollout::GenerationEngine::create(std::move(model), options));
}

std::vector<int64_t> prompt(int64_t b, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < kPrompt; ++t) ids.push_back((b * 31 + t * 7) % vocab);
  return ids;
}

double seconds_of(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Model tokens per second, single-turn.
double single_turn(std::shared_ptr<model::DecoderModel> model) {
  auto engine = make_engine(model);
  for (int64_t b = 0; b < kEpisodes; ++b) {
    rollout::GenerationRequest r;
    r.id = std::to_string(b);
    r.prompt_ids = prompt(b, model->config().vocab_size);
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = kTurns * kTurnTokens;
    (void)engine->submit(r);
  }
  const auto start = std::chrono::steady_clock::now();
  (void)engine->run_until_idle();
  return engine->stats().generated_tokens / seconds_of(start);
}

// Model tokens per second, in episodes.
double multi_turn(std::shared_ptr<model::DecoderModel> model) {
  auto engine = make_engine(model);
  rollout::EpisodeOptions options;
  options.max_turns = kTurns;
  options.turn_max_new_tokens = kTurnTokens;
  options.step_timeout_s = 60;
  rollout::EpisodeRunner runner(engine.get(), std::make_shared<FixedReply>(), nullptr, options);
  auto record = std::make_shared<const core::Json>(core::Json::object());
  for (int64_t b = 0; b < kEpisodes; ++b) {
    rollout::EpisodeRequest r;
    r.id = std::to_string(b);
    r.prompt_ids = prompt(b, model->config().vocab_size);
    r.record = record;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = kTurns * (kTurnTokens + kReplyTokens) + 4;
    (void)runner.submit(r);
  }
  const auto start = std::chrono::steady_clock::now();
  while (!runner.idle()) runner.step();
  const double seconds = seconds_of(start);
  int64_t model_tokens = 0;
  for (const rollout::EpisodeGroup& g : runner.take_finished()) {
    for (const rollout::Episode& e : g.episodes) {
      model_tokens +=
          std::count(e.sample.from_model.begin(), e.sample.from_model.end(), uint8_t{1});
    }
  }
  return model_tokens / seconds;
}

}  // namespace

void report_multi_turn(std::shared_ptr<model::DecoderModel> model, int repeats) {
  double single = 0, multi = 0;
  for (int i = 0; i < repeats; ++i) {
    single = std::max(single, single_turn(model));
    multi = std::max(multi, multi_turn(model));
  }
  std::printf(
      "\nmulti-turn: %lld episodes of %lld greedy turns x %lld tokens, %lld environment tokens "
      "after each turn but the last:\n"
      "  %.1f model tokens/s in episodes vs %.1f tokens/s single-turn for the same %lld tokens "
      "per sequence: %.1f%% (issue 28 target >= 80%%)\n",
      static_cast<long long>(kEpisodes), static_cast<long long>(kTurns),
      static_cast<long long>(kTurnTokens), static_cast<long long>(kReplyTokens), multi, single,
      static_cast<long long>(kTurns * kTurnTokens), 100 * multi / single);
}

}  // namespace flywheel::bench
