// The generation engine: continuous batching over a preallocated KV cache.
//
//   auto engine = GenerationEngine::create(model, options, context);
//   engine->submit({"req-1", prompt_ids, sampling, /*n=*/8});
//   while (!engine->idle()) engine->step();          // or run_until_idle()
//   for (GroupResult& group : engine->take_finished()) ...
//
// Requests wait in a FIFO queue; a request is admitted when n slots are free: its prompt is
// prefilled once (several prompts per forward, up to max_prefill_tokens) and the prefix KV is
// copied into the other n - 1 slots. Every step then runs one batched decode for all active
// sequences; a slot is freed the moment its sequence finishes and is reused by the next
// admission. The cache is allocated once; no per-step reallocation.
//
// Multi-turn requests (multi_turn, used by EpisodeRunner): a sample whose turn ends keeps its
// slot and waits; continue_sample() appends the environment's tokens, which the next step computes
// in one forward with the turn's last token, and the sample goes on from its cached prefix.
//
// Threading: not thread-safe. One thread drives the engine (submit, step, update_weights,
// abort, take_finished).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"
#include "flywheel/rollout/logits_processor.h"
#include "flywheel/rollout/sampling.h"

namespace flywheel::core {
class PluginRegistry;
}  // namespace flywheel::core

namespace flywheel::model {
class Tokenizer;
}  // namespace flywheel::model

namespace flywheel::rollout {

enum class FinishReason { kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct GenerationRequest {
  std::string id;                   // unique among queued and active requests
  std::vector<int64_t> prompt_ids;  // non-empty, ids < vocab_size
  SamplingParams sampling;
  int64_t n = 1;  // samples of this prompt (the group); 1 <= n <= max_slots
  // Multi-turn episodes: a sample whose turn ends (at a stop, or after turn_max_new_tokens)
  // keeps its slot and its KV cache and waits (take_turn_ends()) for continue_sample() or
  // end_sample() instead of finishing. sampling.max_new_tokens then bounds all the tokens after
  // the prompt, the environment's included.
  bool multi_turn = false;
  int64_t turn_max_new_tokens = 0;  // multi_turn: tokens per turn; 0 = no bound of its own
};

// One generated sequence. token_ids, logprobs and versions have one entry per generated token.
struct Sample {
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;    // behaviour log-prob of each token (see LogprobMode)
  std::vector<int64_t> versions;  // policy version that produced each token
  FinishReason finish_reason = FinishReason::kLength;
  std::string error;  // set when finish_reason == kError
  // Multi-turn requests: 1 for a token the model sampled, 0 for one the environment added (log-prob
  // 0, version -1), one per token_ids entry. Empty for single-turn requests (all the model's).
  std::vector<uint8_t> from_model;
  // Mixture-of-experts models: the experts each token of prompt + token_ids was routed to when
  // the engine last computed it, moe_layers x num_experts_per_tok ids per token (kNoRoute for a
  // token the engine did not run: the last one). Empty for dense models.
  std::vector<uint16_t> routes;
};

// Sample::routes of a token the engine did not run.
inline constexpr uint16_t kNoRoute = 0xFFFF;

// A turn of a multi-turn sample that ended; the sample waits in its slot for continue_sample()
// or end_sample().
struct TurnEnd {
  std::string request_id;
  int64_t sample = 0;              // index in the group
  std::vector<int64_t> token_ids;  // the turn's tokens, exactly as sampled, the stop included
  FinishReason reason = FinishReason::kStop;  // kStop: a stop; kLength: turn_max_new_tokens
};

struct GroupResult {
  std::string request_id;
  std::vector<int64_t> prompt_ids;
  std::vector<Sample> samples;  // n samples, in sample-index order (none if aborted in queue)
};

struct EngineOptions {
  int64_t max_slots = 32;      // concurrent sequences (KV-cache slots)
  int64_t max_seq_len = 2048;  // prompt + generated tokens per sequence
  // Tokens one prefill forward computes: prompts are padded to the longest, so this bounds
  // prompts x longest prompt. A prompt longer than this is prefilled alone.
  int64_t max_prefill_tokens = 8192;
  LogprobMode logprob_mode = LogprobMode::kTemperatureScaled;
  bool drain_before_update = false;     // true: apply new weights only once no sequence is active
  bool recompute_kv_on_update = false;  // true: re-prefill active sequences under new weights

  absl::Status validate() const;
};

// What the engine may use besides the model. All optional; not owned.
struct EngineContext {
  const model::Tokenizer* tokenizer = nullptr;  // needed for stop strings
  core::PluginRegistry* registry = nullptr;     // logits processors by name
  int64_t initial_version = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t decode_steps = 0;
  int64_t prefill_tokens = 0;   // tokens of prefill forwards, padding included
  int64_t computed_tokens = 0;  // tokens through the model, padding excluded
  int64_t generated_tokens = 0;
  int64_t weight_updates = 0;
};

class GenerationEngine {
 public:
  // InvalidArgument for invalid options; the model is shared (the engine mutates its weights
  // on update_weights).
  static absl::StatusOr<std::unique_ptr<GenerationEngine>> create(
      std::shared_ptr<model::DecoderModel> model, const EngineOptions& options,
      const EngineContext& context = {});
  ~GenerationEngine();

  // Validates and queues `request`. InvalidArgument naming the problem (empty prompt, prompt
  // too long for max_seq_len, id out of vocabulary, n outside [1, max_slots], bad sampling
  // parameters, stop strings without a tokenizer, unknown logits processor); AlreadyExists for
  // a duplicate id. Nothing else changes on error.
  absl::Status submit(GenerationRequest request);

  // One scheduler iteration: apply a committed weight update if allowed, admit and prefill
  // queued requests into free slots, then one decode step for every active sequence.
  // Failures finish the affected sequences with kError and the engine keeps serving: a failing
  // forward pass (every sequence in it), a row whose logits are not finite (NaN weights, an
  // overflow), a logits processor that throws or leaves no token to sample, a sampled token
  // whose log-prob is not finite. step() does not throw.
  void step();
  bool idle() const { return queue_.empty() && active_ == 0; }
  // Finished groups since the last call, in completion order.
  std::vector<GroupResult> take_finished();
  // Steps until idle and returns everything finished.
  std::vector<GroupResult> run_until_idle();

  // Weight updates, possibly in buckets:
  //   stage_weights(bucket, v) ... stage_weights(bucket, v); commit_weights(v);
  // stage_weights() validates (unknown name, shape mismatch: InvalidArgument, nothing staged)
  // and copies the tensors (converted to the model's dtype and device), so the caller may change
  // its own tensors right after the call. `version` must be newer than version() and not older
  // than what is staged (InvalidArgument). Staging a newer version than the staged one keeps the
  // staged tensors it does not name: they are applied together with it. Nothing is applied
  // until the staged version is committed; then it is applied at the start of a later step:
  // between decode steps, without dropping active sequences (or once they drained, with
  // drain_before_update), all tensors at once. Tokens sampled after the swap carry the version.
  // Staging holds a copy of every staged tensor until it is applied.
  absl::Status stage_weights(const std::vector<std::pair<std::string, at::Tensor>>& weights,
                             int64_t version);
  // Marks the staged `version` complete. FailedPrecondition when `version` is not the staged one.
  absl::Status commit_weights(int64_t version);
  // stage_weights() then commit_weights(): a whole update in one call.
  absl::Status update_weights(const std::vector<std::pair<std::string, at::Tensor>>& weights,
                              int64_t version);

  // Finishes every sequence of `request_id` with kAbort (tokens so far are kept), or drops it
  // from the queue (its GroupResult then has no samples). NotFound when no such request is
  // queued or active.
  absl::Status abort(const std::string& request_id);
  void abort_all();

  // Turns of multi-turn samples that ended since the last call, in order. A turn end of a
  // request aborted since may be among them; continue_sample() then answers NotFound.
  std::vector<TurnEnd> take_turn_ends();
  // Appends `observation` (the environment's token ids: computed in the next step, together with
  // the turn's last token, never sampled) to a waiting sample, which then generates its next
  // turn. NotFound when no such sample waits; InvalidArgument for an id outside the vocabulary;
  // OutOfRange when the ids leave no room for a token (max_seq_len, or the request's
  // max_new_tokens). On error the sample keeps waiting.
  absl::Status continue_sample(const std::string& request_id, int64_t sample,
                               const std::vector<int64_t>& observation);
  // Finishes a waiting sample with `reason` (its episode is over) and frees its slot. NotFound
  // when no such sample waits.
  absl::Status end_sample(const std::string& request_id, int64_t sample, FinishReason reason);
  // Forgets the version of the weights held and any staged update, so that the next update may
  // carry any version above `version` (a restarted controller publishes older versions than
  // the engine saw). The weights themselves stay until that update. FailedPrecondition unless
  // idle().
  absl::Status reset_version(int64_t version);

  // The tokens sample `sample` of `request_id` has so far (streaming), or null when no such
  // request is queued or active. Valid until the next call that changes the engine.
  const Sample* progress(const std::string& request_id, int64_t sample) const;

  int64_t version() const { return version_; }
  int64_t active_sequences() const { return active_; }
  int64_t queued_requests() const { return static_cast<int64_t>(queue_.size()); }
  const EngineStats& stats() const { return stats_; }
  const model::DecoderModel& model() const { return *model_; }

 private:
  struct Group;
  struct Sequence;

  GenerationEngine(std::shared_ptr<model::DecoderModel> model, const EngineOptions& options,
                   const EngineContext& context);
  void apply_pending_update();
  bool update_ready() const { return staged_.has_value() && staged_->committed; }
  void run_step();
  void admit();
  // Zeroes what earlier sequences left in `slot` past `from`: masked cache positions must
  // contribute exactly nothing to attention, and 0 x NaN is NaN.
  void clear_slot(int64_t slot, int64_t from);
  void decode();
  // One forward of `batch` (row b: sequences[b]'s tokens) through the cache; the logits of each
  // row's last token (lengths[b] - 1), [B, vocab]. Throws what the forward throws.
  at::Tensor last_logits(const model::ForwardBatch& batch, const std::vector<Sequence*>& sequences);
  // The cached forward of `batch`, keeping a mixture-of-experts model's routes in `sequences`
  // (row b's), [B, T, hidden].
  at::Tensor forward(const model::ForwardBatch& batch, const std::vector<Sequence*>& sequences);
  // One forward for the sequences with several tokens to compute (an observation after a turn),
  // then their next tokens.
  void extend();
  void end_turn(Sequence& seq, FinishReason reason);
  Sequence* waiting_sequence(const std::string& request_id, int64_t sample);
  // Samples one token per row of `logits` ([rows, vocab] float32) for `sequences`, every row at
  // once (logits processors alone run row by row), with one transfer of the sampled ids and
  // log-probs to the host. A row that cannot be sampled ends its sequence with an error.
  void sample_and_append(const at::Tensor& logits, const std::vector<Sequence*>& sequences);
  // Runs the logits processors of `sequences` on a copy of `logits` (*work) when any has one;
  // a sequence whose processor throws is finished and marked in `failed`. True when any ran.
  bool run_processors(const at::Tensor& logits, const std::vector<Sequence*>& sequences,
                      at::Tensor* work, std::vector<uint8_t>* failed);
  // Appends each row's token of `host` (tokens, log-probs and three flags, [5, B] float64), or
  // finishes the sequence with the error its flags name.
  void append_rows(const at::Tensor& host, const std::vector<Sequence*>& sequences,
                   const std::vector<uint8_t>& failed);
  void append_token(Sequence& seq, int64_t token, float logprob);
  void finish(Sequence& seq, FinishReason reason, const std::string& error = "");
  void fail_active(const std::string& error);
  bool hit_stop_string(const Sequence& seq) const;

  std::shared_ptr<model::DecoderModel> model_;
  EngineOptions options_;
  EngineContext context_;
  std::unique_ptr<model::KvCache> cache_;
  int64_t version_;
  std::vector<std::unique_ptr<Sequence>> slots_;  // slot -> sequence (null = free)
  // Positions [0, dirty_[slot]) of a slot may hold keys/values of earlier sequences.
  std::vector<int64_t> dirty_;
  int64_t active_ = 0;
  std::map<std::string, std::unique_ptr<Group>> groups_;  // queued and active, by request id
  std::deque<Group*> queue_;
  std::vector<GroupResult> finished_;
  std::vector<TurnEnd> turn_ends_;
  struct StagedWeights {
    int64_t version = 0;
    bool committed = false;
    std::map<size_t, at::Tensor> tensors;  // index into named_parameters() -> owned copy
  };
  std::optional<StagedWeights> staged_;
  EngineStats stats_;
};

}  // namespace flywheel::rollout
