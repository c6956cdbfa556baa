// Sampling parameters of a generation request, and the truncation rules they imply.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "flywheel/core/options/rollout_options.h"

namespace flywheel::rollout {

// A logits processor selected by registry name, with its parameters.
struct LogitsProcessorSpec {
  std::string name;
  std::map<std::string, std::string> params;
};

// The smallest positive temperature: below it logits / temperature overflows float32.
constexpr double kMinTemperature = 1e-5;

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy, else >= kMinTemperature
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = off
  double top_p = 1.0;        // keep the smallest set with probability >= top_p; 1 = off
  double min_p = 0.0;        // drop tokens below min_p x the top probability; 0 = off
  int64_t max_new_tokens = 256;
  std::vector<int64_t> stop_token_ids;    // generation ends after any of these (kept in output)
  std::vector<std::string> stop_strings;  // ... or once the text contains one (needs a tokenizer)
  uint64_t seed = 0;  // sample i of a request draws from a generator seeded by (seed, i)
  std::vector<LogitsProcessorSpec> logits_processors;  // applied first, in order

  // InvalidArgument naming the field: temperature neither 0 nor >= kMinTemperature, top_k < 0,
  // top_p outside (0, 1], min_p outside [0, 1], max_new_tokens < 1.
  absl::Status validate() const;
};

// Which distribution the per-token behaviour log-prob is taken under (rollout.logprob_mode):
//  kTemperatureScaled: log_softmax(raw_logits / temperature) -- what the learner recomputes
//    (temperature 0 counts as 1); the default, and the one the IS corrections assume.
//  kProcessed: the distribution actually sampled from (after logits processors and top-k /
//    top-p / min-p truncation, renormalised); 0 for greedy.
using LogprobMode = core::LogprobMode;

// Sets to -inf every entry of `scaled` (float32 [V], logits already divided by the temperature)
// that top-k, top-p and min-p exclude, in Hugging Face's order (top-k, top-p, min-p). At least
// one token always survives.
void truncate_logits(at::Tensor& scaled, const SamplingParams& params);
// The same for every row of `scaled` [R, V] at once, row r under params[r] (R entries).
void truncate_logits_rows(at::Tensor& scaled, const std::vector<const SamplingParams*>& params);

// How many of each row's most likely tokens sample_among_candidates looks at.
constexpr int64_t kSampleCandidates = 256;

// Truncates (top-k, top-p, min-p, as truncate_logits_rows), renormalises and draws row r of
// `scaled` [R, V] at uniforms[r] ([R] float64) among its `candidates` most likely tokens alone,
// into tokens[r] (int64) and logprobs[r] (float32: the token's log-probability under that
// distribution). Returns which rows (bool [R]) are valid: those whose truncation keeps only
// candidates (top-k <= candidates, or top-p or min-p cutting within them), for which the tokens
// kept, and so the distribution drawn from, are those of the whole-vocabulary path, without its
// passes over [V]. Which rows qualify depends on each row alone. The other rows' entries are
// meaningless: draw them over the whole vocabulary. Undefined off the CPU or when `candidates`
// covers the vocabulary. Candidates are drawn in descending order of probability, so a uniform
// picks a different token than sample_from_probs in vocabulary order would. `scaled_norm` [R, 1],
// when given, is at::logsumexp(scaled, -1, true), which the caller already has.
at::Tensor sample_among_candidates(const at::Tensor& scaled,
                                   const std::vector<const SamplingParams*>& params,
                                   const at::Tensor& uniforms, int64_t candidates,
                                   at::Tensor* tokens, at::Tensor* logprobs,
                                   const at::Tensor& scaled_norm = {});

// Truncates row r of `scaled` [R, V] under params[r] (as truncate_logits_rows), renormalises and
// draws it at uniforms[r] ([R] float64) over the whole vocabulary, into tokens[r] (int64 [R]) and
// logprobs[r] (float32 [R]: the token's log-probability under that distribution), on scaled's
// device; `scaled` is left as it is. On the CPU a row with neither top-k nor min-p is drawn with
// one pass over the row for its cut (top-p without a sort) and part of one for the draw, and
// without a softmax; its tokens are taken nearest the maximum first, not in vocabulary order.
// Other rows, and every row off the CPU, go through truncate_logits_rows, softmax and
// sample_from_probs. `scaled_norm` ([R] or [R, 1]), when given, is at::logsumexp(scaled, -1),
// which the caller already has.
void sample_rows(const at::Tensor& scaled, const std::vector<const SamplingParams*>& params,
                 const at::Tensor& uniforms, at::Tensor* tokens, at::Tensor* logprobs,
                 const at::Tensor& scaled_norm = {});

// A reproducible 64-bit seed for sample `index` of a request seeded with `seed`.
uint64_t sample_seed(uint64_t seed, int64_t index);

// The uniform number in [0, 1) that draws the token at `position` (tokens generated before it)
// of a sample seeded with `seed` (sample_seed()). Counter-based: a sample's draws do not depend
// on which other sequences share its batch.
double sample_uniform(uint64_t seed, int64_t position);

// One token per row of `probs` [R, V] (non-negative rows with a positive sum) by inverse CDF at
// `uniforms` [R] (in [0, 1), any floating dtype): token j with probability probs[r][j] / sum; a
// zero entry is never drawn. int64 [R], on probs' device.
at::Tensor sample_from_probs(const at::Tensor& probs, const at::Tensor& uniforms);

}  // namespace flywheel::rollout
