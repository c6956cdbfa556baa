// Held-out evaluation (`eval:`), for `flywheel train`, `flywheel eval` and `flywheel sft`: every
// rank copies the sharded model's full weights into a local replica (collective), generates with
// the rollout engine for its share of the records (one greedy completion each and, with
// eval.samples = k, k sampled ones), judges each completion, and the ranks add up the counts.
//
// Judges: `answer` — the completion's text, up to the eos and stripped of surrounding whitespace,
// equals the record's answer stripped the same way (records without an answer are skipped);
// `rewards` — the run's reward functions score the completion (with the record, as the rollout
// workers do) and it is correct when the reward is >= eval.correct_reward.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/config.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rewards/scoring_pool.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/episode_runner.h"
#include "flywheel/rollout/worker/prompt_encoder.h"
#include "flywheel/trainer/sft_data.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::eval {

struct HeldOutEvalOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> stop_ids;  // eos ids
  int64_t max_slots = 16;
  // k sampled completions per record (0 = greedy only) and how they are drawn.
  int64_t samples = 0;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 0;
  // The rewards judge: null = the answer judge. Not owned; must outlive the evaluator.
  rewards::ScoringPool* scorer = nullptr;
  double correct_reward = 1.0;
  // With an environment every completion is an episode (rollout/episode_runner.h), and
  // max_new_tokens bounds all of an episode's tokens after the prompt. The answer judge then
  // judges the text of the episode's last model turn; the rewards judge the whole episode, as
  // on the rollout workers. The records need their JSON (load_eval_data keeps it).
  std::shared_ptr<const rollout::Environment> environment;
  rollout::EpisodeOptions episodes;
};

struct HeldOutEvalResult {
  int64_t records = 0;     // records judged, all ranks
  double accuracy = 0;     // greedy completions judged correct; NaN when no record is judged
  double mean_reward = 0;  // greedy completions' mean reward (rewards judge; NaN otherwise)
  double mean_length = 0;  // generated tokens per greedy completion (the eos included)
  int64_t k = 0;           // samples per record (0: the next two are NaN)
  double pass_at_k = 0;    // records with at least one of k samples correct
  double mean_at_k = 0;    // correct samples / all samples
  // Greedy episodes (with an environment; NaN without): model turns and tool calls per episode.
  double mean_turns = std::numeric_limits<double>::quiet_NaN();
  double mean_tool_calls = std::numeric_limits<double>::quiet_NaN();
};

// The held-out records of `path` ({"prompt" or "messages", and an answer for the answer judge;
// a response is not needed), the first eval.max_prompts of them when that is set.
absl::StatusOr<trainer::SftData> load_eval_data(const core::Config& config,
                                                const model::TokenizerSetup& tokenizers,
                                                int64_t vocab_size, const std::string& path);

// The scoring pool of the rewards judge when eval.judge resolves to it (`rewards`, or `auto`
// with rewards.functions set), else null. Relative paths in rewards params are resolved against
// `config_dir` (the config file's directory), as on the rollout workers.
absl::StatusOr<std::unique_ptr<rewards::ScoringPool>> make_eval_scorer(
    const core::Config& config, core::PluginRegistry& registry, const std::string& config_dir);

// The options of the config's `eval:` section (max_new_tokens, else rollout.max_new_tokens), the
// model's eos ids and `scorer` (may be null).
HeldOutEvalOptions eval_options_from_config(const core::Config& config,
                                            const model::ModelConfig& model_config,
                                            rewards::ScoringPool* scorer);

// The environment `environment.name` names (none: single-turn), with the episode options and
// the chat template's turn markers, into `options`.
absl::Status set_eval_environment(const core::Config& config, core::PluginRegistry& registry,
                                  const std::string& config_dir,
                                  const model::TokenizerSetup& tokenizers,
                                  HeldOutEvalOptions* options);

// Hands `log` the result's metrics: eval/accuracy, eval/mean_length, eval/reward/mean (rewards
// judge), eval/pass@<k> and eval/mean@<k> (with samples), eval/turns/mean and
// eval/tool_calls/mean (episodes).
void log_eval_result(const HeldOutEvalResult& result,
                     const std::function<void(const std::string&, double)>& log);

class HeldOutEvaluator {
 public:
  // The replica and the engine are allocated once (a full copy of the model on every rank); the
  // engine's context fits the longest prompt of `records` plus max_new_tokens.
  static absl::StatusOr<std::unique_ptr<HeldOutEvaluator>> create(
      const model::ModelConfig& config, const model::Tokenizer* tokenizer,
      const HeldOutEvalOptions& options, const std::vector<trainer::SftRecord>& records);
  // The sharded `model`'s full weights on `records`. Collective over `comm`.
  absl::StatusOr<HeldOutEvalResult> evaluate(trainer::ShardedDecoder& model,
                                             const std::vector<trainer::SftRecord>& records,
                                             comm::Communicator& comm);
  // The same for weights loaded by name (a Hugging Face directory): `flywheel eval`.
  absl::Status load(const model::DecoderModel::TensorLookup& lookup);
  absl::StatusOr<HeldOutEvalResult> evaluate_loaded(const std::vector<trainer::SftRecord>& records,
                                                    comm::Communicator& comm);

 private:
  HeldOutEvaluator() = default;
  bool judged(const trainer::SftRecord& record) const {
    return options_.scorer != nullptr || record.has_answer;
  }
  struct Generated;
  rollout::SamplingParams sampling(bool sampled, int64_t index) const;
  // Submits this rank's share of `records` (greedy, and k sampled with eval.samples) through
  // `submit`, which returns the engine's (or runner's) answer; refusals are counted and logged.
  template <typename EngineRequest, typename Submit>
  void submit_share(const std::vector<trainer::SftRecord>& records, comm::Communicator& comm,
                    Generated* out, Submit submit);
  // This rank's share of `records`, generated: single completions or episodes.
  void generate(const std::vector<trainer::SftRecord>& records, comm::Communicator& comm,
                Generated* out);
  void run_episodes(const std::vector<trainer::SftRecord>& records, comm::Communicator& comm,
                    Generated* out);
  std::shared_ptr<model::DecoderModel> replica_;
  std::unique_ptr<rollout::GenerationEngine> engine_;
  const model::Tokenizer* tokenizer_ = nullptr;
  HeldOutEvalOptions options_;
};

// A held-out evaluation as a job sets it up: the records of a file, the judge of `eval:` and
// the evaluator.
struct HeldOutEvaluation {
  trainer::SftData data;
  std::unique_ptr<rewards::ScoringPool> scorer;      // null: the answer judge
  std::unique_ptr<HeldOutEvaluator> evaluator;       // null until set_up()
  double first_accuracy = NAN, last_accuracy = NAN;  // of the evaluations a job ran

  // load_eval_data(), make_eval_scorer() and the evaluator of eval_options_from_config().
  absl::Status set_up(const core::Config& config, core::PluginRegistry& registry,
                      const std::string& config_dir, const model::ModelConfig& model_config,
                      const model::TokenizerSetup& tokenizers, const std::string& path);
};

}  // namespace flywheel::eval
