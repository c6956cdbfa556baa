#include "flywheel/rollout/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine_state.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "step_rows.h"

namespace flywheel::rollout {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

absl::Status EngineOptions::validate() const {
  if (max_slots < 1) return absl::InvalidArgumentError("max_slots must be >= 1");
  if (max_seq_len < 2) return absl::InvalidArgumentError("max_seq_len must be >= 2");
  if (max_prefill_tokens < 1) return absl::InvalidArgumentError("max_prefill_tokens must be >= 1");
  return absl::OkStatus();
}

GenerationEngine::GenerationEngine(std::shared_ptr<model::DecoderModel> model,
                                   const EngineOptions& options, const EngineContext& context)
    : model_(std::move(model)),
      options_(options),
      context_(context),
      version_(context.initial_version),
      slots_(options.max_slots),
      dirty_(options.max_slots, 0) {}

GenerationEngine::~GenerationEngine() = default;

absl::StatusOr<std::unique_ptr<GenerationEngine>> GenerationEngine::create(
    std::shared_ptr<model::DecoderModel> model, const EngineOptions& options,
    const EngineContext& context) {
  if (model == nullptr) return absl::InvalidArgumentError("engine needs a model");
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  std::unique_ptr<GenerationEngine> engine(
      new GenerationEngine(std::move(model), options, context));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::KvCache> cache,
                            engine->model_->make_cache(options.max_slots, options.max_seq_len));
  engine->cache_ = std::move(cache);
  engine->model_->pack_weights();  // now, rather than in the first step
  return engine;
}

absl::Status GenerationEngine::submit(GenerationRequest request) {
  const int64_t vocab = model_->config().vocab_size;
  if (request.id.empty()) return absl::InvalidArgumentError("request id must not be empty");
  if (groups_.count(request.id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request '", request.id, "' is already queued or active"));
  }
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("request '", request.id, "': ", why));
  };
  if (request.prompt_ids.empty()) return bad("empty prompt");
  if (static_cast<int64_t>(request.prompt_ids.size()) >= options_.max_seq_len) {
    return bad(absl::StrCat("prompt of ", request.prompt_ids.size(),
                            " tokens leaves no room in the context of ", options_.max_seq_len,
                            " tokens (max_seq_len)"));
  }
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    if (request.prompt_ids[i] < 0 || request.prompt_ids[i] >= vocab) {
      return bad(absl::StrCat("prompt token ", i, " has id ", request.prompt_ids[i],
                              ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (request.turn_max_new_tokens < 0) return bad("turn_max_new_tokens must be >= 0");
  if (request.n < 1 || request.n > options_.max_slots) {
    return bad(
        absl::StrCat("n must be in [1, ", options_.max_slots, "] (max_slots), got ", request.n));
  }
  absl::Status sampling = request.sampling.validate();
  if (!sampling.ok()) return bad(std::string(sampling.message()));
  for (int64_t id : request.sampling.stop_token_ids) {
    if (id < 0 || id >= vocab)
      return bad(absl::StrCat("stop token id ", id, " is outside the vocabulary"));
  }
  if (!request.sampling.stop_strings.empty() && context_.tokenizer == nullptr) {
    return bad("stop strings need a tokenizer");
  }
  auto group = std::make_unique<Group>();
  for (const LogitsProcessorSpec& spec : request.sampling.logits_processors) {
    if (context_.registry == nullptr) return bad("logits processors need a registry");
    auto processor = context_.registry->get<LogitsProcessor, const LogitsProcessorParams&>().create(
        spec.name, spec.params);
    if (!processor.ok()) return bad(std::string(processor.status().message()));
    group->processors.push_back(std::move(*processor));
  }
  group->samples.resize(request.n);
  group->unfinished = request.n;
  group->request = std::move(request);
  Group* raw = group.get();
  groups_[raw->request.id] = std::move(group);
  queue_.push_back(raw);
  return absl::OkStatus();
}

void GenerationEngine::apply_pending_update() {
  if (!update_ready()) return;
  if (options_.drain_before_update && active_ > 0) return;
  {
    at::NoGradGuard no_grad;
    const auto& params = model_->named_parameters();
    for (const auto& [i, tensor] : staged_->tensors) params[i].second.copy_(tensor);
    model_->merge_adapters();  // merged LoRA adapters follow their parameters
    model_->pack_weights();    // the packed copies too, rewritten where they are
  }
  version_ = staged_->version;
  staged_.reset();
  ++stats_.weight_updates;
  if (!options_.recompute_kv_on_update || active_ == 0) return;
  // Re-prefill every cached prefix under the new weights, one sequence per row.
  std::vector<Sequence*> rows;
  int64_t longest = 0;
  for (auto& seq : slots_) {
    if (seq && seq->cached > 0) {
      rows.push_back(seq.get());
      longest = std::max(longest, seq->cached);
    }
  }
  try {
    at::NoGradGuard no_grad;
    model::ForwardBatch batch;
    const int64_t B = rows.size();
    batch.tokens = at::zeros({B, longest}, at::kLong);
    batch.positions = at::zeros({B, longest}, at::kLong);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = rows[b]->cached;
      batch.tokens[b].narrow(0, 0, n).copy_(
          at::tensor(std::vector<int64_t>(rows[b]->tokens.begin(), rows[b]->tokens.begin() + n)));
      batch.positions[b].narrow(0, 0, n).copy_(at::arange(n, at::kLong));
      batch.slots.push_back(rows[b]->slot);
      batch.lengths.push_back(n);
    }
    forward(batch, rows);
    stats_.prefill_tokens += B * longest;
    for (Sequence* seq : rows) stats_.computed_tokens += seq->cached;
  } catch (const std::exception& e) {
    fail_active(absl::StrCat("recomputing the KV cache after a weight update failed: ", e.what()));
  }
}

void GenerationEngine::clear_slot(int64_t slot, int64_t from) {
  if (dirty_[slot] > from) cache_->clear(slot, from, dirty_[slot]);
  dirty_[slot] = 0;
}

void GenerationEngine::admit() {
  if (update_ready() && options_.drain_before_update) return;  // let active sequences drain
  std::vector<Group*> admitted;
  std::vector<int64_t> first_slots;
  int64_t free = 0;
  for (const auto& s : slots_) free += s == nullptr;
  int64_t longest_prompt = 0;
  while (!queue_.empty()) {
    Group* group = queue_.front();
    const int64_t n = group->request.n;
    const int64_t length = group->request.prompt_ids.size();
    if (n > free) break;  // FIFO: wait for enough slots
    // The forward computes (groups) x (longest prompt) tokens, padding included.
    const int64_t padded =
        static_cast<int64_t>(admitted.size() + 1) * std::max(longest_prompt, length);
    if (!admitted.empty() && padded > options_.max_prefill_tokens) break;
    queue_.pop_front();
    group->admitted = true;
    free -= n;
    longest_prompt = std::max(longest_prompt, length);
    int64_t sample = 0;
    for (int64_t slot = 0; slot < options_.max_slots && sample < n; ++slot) {
      if (slots_[slot]) continue;
      auto seq = std::make_unique<Sequence>();
      seq->group = group;
      seq->index = sample;
      seq->slot = slot;
      seq->tokens = group->request.prompt_ids;
      seq->seed = sample_seed(group->request.sampling.seed, sample);
      // Positions below the prompt's length are overwritten by the prefill (or its copy).
      clear_slot(slot, length);
      if (sample == 0) first_slots.push_back(slot);
      slots_[slot] = std::move(seq);
      ++active_;
      ++sample;
    }
    admitted.push_back(group);
  }
  if (admitted.empty()) return;

  // One prefill forward: row g holds group g's prompt, written into its first sample's slot.
  const int64_t G = admitted.size();
  int64_t longest = 0;
  for (Group* g : admitted) longest = std::max<int64_t>(longest, g->request.prompt_ids.size());
  model::ForwardBatch batch;
  batch.tokens = at::zeros({G, longest}, at::kLong);
  batch.positions = at::zeros({G, longest}, at::kLong);
  std::vector<Sequence*> firsts;
  for (int64_t g = 0; g < G; ++g) {
    const auto& prompt = admitted[g]->request.prompt_ids;
    const int64_t n = prompt.size();
    batch.tokens[g].narrow(0, 0, n).copy_(at::tensor(prompt, at::kLong));
    batch.positions[g].narrow(0, 0, n).copy_(at::arange(n, at::kLong));
    batch.slots.push_back(first_slots[g]);
    batch.lengths.push_back(n);
    firsts.push_back(slots_[first_slots[g]].get());
  }
  at::Tensor logits;
  try {
    logits = last_logits(batch, firsts);
  } catch (const std::exception& e) {
    for (auto& seq : slots_) {
      if (seq && !seq->group->samples.empty() && seq->cached == 0) {
        finish(*seq, FinishReason::kError, absl::StrCat("prefill failed: ", e.what()));
      }
    }
    return;
  }
  stats_.prefill_tokens += G * longest;
  for (Group* g : admitted) stats_.computed_tokens += g->request.prompt_ids.size();
  // Share each prompt's KV with the group's other slots, then sample every first token.
  std::vector<Sequence*> sequences;
  std::vector<int64_t> logit_rows;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t length = admitted[g]->request.prompt_ids.size();
    for (auto& seq : slots_) {
      if (!seq || seq->group != admitted[g]) continue;
      if (seq->slot != first_slots[g]) {
        cache_->copy_prefix(first_slots[g], seq->slot, length);
        seq->routes = firsts[g]->routes;
      }
      seq->cached = length;
      sequences.push_back(seq.get());
      logit_rows.push_back(g);
    }
  }
  sample_and_append(logits.index_select(0, at::tensor(logit_rows, at::kLong).to(logits.device())),
                    sequences);
}

at::Tensor GenerationEngine::forward(const model::ForwardBatch& batch,
                                     const std::vector<Sequence*>& sequences) {
  at::NoGradGuard no_grad;
  if (model_->config().num_moe_layers() == 0) return model_->forward(batch, cache_.get());
  model::RouteRecord record;
  at::Tensor hidden = model_->forward(batch, cache_.get(), &record);
  // [B, T, moe_layers, k] on the host: each computed token's ids go to its position.
  const at::Tensor routes = record.stacked().to(at::kInt).contiguous();
  const int64_t T = routes.size(1), width = routes.size(2) * routes.size(3);
  const int32_t* ids = routes.data_ptr<int32_t>();
  const at::Tensor positions = batch.positions.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (size_t b = 0; b < sequences.size(); ++b) {
    std::vector<uint16_t>& kept = sequences[b]->routes;
    for (int64_t t = 0; t < batch.lengths[b]; ++t) {
      const int64_t offset = pos[b * T + t] * width;
      if (static_cast<int64_t>(kept.size()) < offset + width) {
        kept.resize(offset + width, kNoRoute);
      }
      const int32_t* row = ids + (static_cast<int64_t>(b) * T + t) * width;
      std::copy(row, row + width, kept.begin() + offset);
    }
  }
  return hidden;
}

at::Tensor GenerationEngine::last_logits(const model::ForwardBatch& batch,
                                         const std::vector<Sequence*>& sequences) {
  at::NoGradGuard no_grad;
  at::Tensor hidden = forward(batch, sequences);
  std::vector<int64_t> last;
  for (int64_t length : batch.lengths) last.push_back(length - 1);
  const int64_t B = static_cast<int64_t>(last.size());
  // Stays on the model's device: sampled there.
  return model_->logits(
      hidden.index({at::arange(B, at::kLong), at::tensor(last, at::kLong).to(hidden.device())}));
}

void GenerationEngine::decode() {
  std::vector<Sequence*> rows;
  for (auto& seq : slots_) {
    if (seq && !seq->waiting && static_cast<int64_t>(seq->tokens.size()) == seq->cached + 1) {
      rows.push_back(seq.get());
    }
  }
  if (rows.empty()) return;
  const int64_t B = rows.size();
  model::ForwardBatch batch;
  std::vector<int64_t> tokens, positions;
  for (Sequence* seq : rows) {
    tokens.push_back(seq->tokens.back());
    positions.push_back(seq->cached);
    batch.slots.push_back(seq->slot);
    batch.lengths.push_back(1);
  }
  batch.tokens = at::tensor(tokens, at::kLong).view({B, 1});
  batch.positions = at::tensor(positions, at::kLong).view({B, 1});
  at::Tensor logits;
  try {
    at::NoGradGuard no_grad;
    logits = model_->logits(forward(batch, rows)).view({B, -1});
  } catch (const std::exception& e) {
    fail_active(absl::StrCat("decode step failed: ", e.what()));
    return;
  }
  ++stats_.decode_steps;
  stats_.computed_tokens += B;
  for (Sequence* seq : rows) ++seq->cached;
  sample_and_append(logits, rows);
}

bool GenerationEngine::run_processors(const at::Tensor& logits,
                                      const std::vector<Sequence*>& sequences, at::Tensor* work,
                                      std::vector<uint8_t>* failed) {
  bool ran = false;
  for (size_t b = 0; b < sequences.size(); ++b) {
    Sequence& seq = *sequences[b];
    if (seq.group->processors.empty()) continue;
    if (!ran) *work = logits.clone();
    ran = true;
    at::Tensor row = (*work)[static_cast<int64_t>(b)];
    try {
      for (const auto& processor : seq.group->processors) processor->apply(row, seq.tokens);
    } catch (const std::exception& e) {
      finish(seq, FinishReason::kError, absl::StrCat("sampling failed: ", e.what()));
      (*failed)[b] = 1;
    }
  }
  return ran;
}

void GenerationEngine::sample_and_append(const at::Tensor& logits,
                                         const std::vector<Sequence*>& sequences) {
  const int64_t B = sequences.size();
  // The passes over [B, V] run row range by row range on the model's CPU threads (ATen itself
  // has one under the float32 thread layout); on a GPU in one range.
  model::WorkerPool* pool = logits.device().is_cpu() ? model_->cpu_pool() : nullptr;
  // Behaviour log-probs under temperature-scaled logits (temperature 0 counts as 1), for all
  // rows at once.
  std::vector<double> temperatures;
  for (Sequence* seq : sequences) temperatures.push_back(seq->group->request.sampling.temperature);
  const ScaledRows rows = scale_rows(logits, temperatures, pool);
  // Logits processors (rare) run row by row on a copy; every other step is batched.
  at::Tensor work = logits;
  std::vector<uint8_t> failed(B, 0);
  const bool processors_ran = run_processors(logits, sequences, &work, &failed);
  // Greedy and sampled rows, drawn together whatever their logits hold: rows found unusable
  // below (non-finite logits, processors that left no token) are discarded after the transfer.
  std::vector<int64_t> greedy, sampled;
  for (int64_t b = 0; b < B; ++b) {
    if (failed[b]) continue;
    (sequences[b]->group->request.sampling.temperature == 0 ? greedy : sampled).push_back(b);
  }
  if (greedy.empty() && sampled.empty()) return;
  at::Tensor tokens = at::zeros({B}, logits.options().dtype(at::kLong));
  at::Tensor processed = at::zeros({B}, logits.options());  // 0 for greedy rows
  if (static_cast<int64_t>(greedy.size()) == B && !processors_ran) {
    model::parallel_rows(pool, B, kMinRowsPerThread, [&](int64_t begin, int64_t end) {
      tokens.narrow(0, begin, end - begin).copy_(logits.narrow(0, begin, end - begin).argmax(-1));
    });
  } else if (!greedy.empty()) {
    at::Tensor which = at::tensor(greedy, at::kLong).to(logits.device());
    tokens.index_copy_(0, which, work.index_select(0, which).argmax(-1));
  }
  if (!sampled.empty()) {
    at::Tensor which = at::tensor(sampled, at::kLong).to(logits.device());
    std::vector<const SamplingParams*> params;
    std::vector<double> uniforms;
    for (int64_t b : sampled) {
      Sequence& seq = *sequences[b];
      params.push_back(&seq.group->request.sampling);
      uniforms.push_back(sample_uniform(seq.seed, seq.sample().token_ids.size()));
    }
    const bool every_row = static_cast<int64_t>(sampled.size()) == B;
    at::Tensor scaled, norm;  // norm: each row's logsumexp, when known
    if (processors_ran) {
      scaled = work.index_select(0, which) / rows.scale.index_select(0, which);
    } else {
      scaled = every_row ? rows.scaled : rows.scaled.index_select(0, which);
      norm = every_row ? rows.norm : rows.norm.index_select(0, which);
    }
    at::Tensor drawn, drawn_logprobs;
    draw_rows(scaled, norm, params, uniforms, pool, &drawn, &drawn_logprobs);
    tokens.index_copy_(0, which, drawn);
    processed.index_copy_(0, which, drawn_logprobs);
  }
  at::Tensor logprobs = options_.logprob_mode == LogprobMode::kTemperatureScaled
                            ? (rows.scaled.gather(-1, tokens.view({-1, 1})) - rows.norm).view({-1})
                            : processed;
  // Per row: finite logits from the model; after the processors (when any ran), no NaN or +inf
  // and at least one token left.
  at::Tensor processed_bad = at::zeros_like(rows.finite), any_left = at::ones_like(rows.finite);
  if (processors_ran) {
    processed_bad = (at::isnan(work) | at::isposinf(work)).any(-1);
    any_left = work.amax(-1) > -std::numeric_limits<float>::infinity();
  }
  // The one transfer of the step: every row's token, log-prob and flags.
  const at::Tensor host =
      at::stack({tokens.to(at::kDouble), logprobs.to(at::kDouble), rows.finite.to(at::kDouble),
                 processed_bad.to(at::kDouble), any_left.to(at::kDouble)})
          .to(at::kCPU)
          .contiguous();
  append_rows(host, sequences, failed);
}

void GenerationEngine::append_rows(const at::Tensor& host, const std::vector<Sequence*>& sequences,
                                   const std::vector<uint8_t>& failed) {
  const double* token_of = host[0].data_ptr<double>();
  const double* logprob_of = host[1].data_ptr<double>();
  const double* model_finite = host[2].data_ptr<double>();
  const double* bad_after_processors = host[3].data_ptr<double>();
  const double* token_left = host[4].data_ptr<double>();
  for (size_t b = 0; b < sequences.size(); ++b) {
    if (failed[b]) continue;
    Sequence& seq = *sequences[b];
    const int64_t token = static_cast<int64_t>(token_of[b]);
    const float logprob = static_cast<float>(logprob_of[b]);
    if (model_finite[b] == 0) {
      finish(seq, FinishReason::kError, "the model produced non-finite logits");
    } else if (bad_after_processors[b] != 0) {
      finish(seq, FinishReason::kError,
             "sampling failed: the logits processors produced NaN or +inf");
    } else if (token_left[b] == 0) {
      finish(seq, FinishReason::kError, "the logits processors left no token that can be sampled");
    } else if (!std::isfinite(logprob)) {
      finish(seq, FinishReason::kError,
             absl::StrCat("sampling failed: token ", token, " has log-prob ", logprob));
    } else {
      append_token(seq, token, logprob);
    }
  }
}

void GenerationEngine::append_token(Sequence& seq, int64_t token, float logprob) {
  Sample& sample = seq.sample();
  seq.tokens.push_back(token);
  sample.token_ids.push_back(token);
  sample.logprobs.push_back(logprob);
  sample.versions.push_back(version_);
  const GenerationRequest& request = seq.group->request;
  if (request.multi_turn) sample.from_model.push_back(1);
  ++stats_.generated_tokens;
  const SamplingParams& params = request.sampling;
  const auto& stops = params.stop_token_ids;
  const bool stop =
      std::find(stops.begin(), stops.end(), token) != stops.end() || hit_stop_string(seq);
  if (static_cast<int64_t>(sample.token_ids.size()) >= params.max_new_tokens ||
      static_cast<int64_t>(seq.tokens.size()) >= options_.max_seq_len) {
    // No room for another token: the episode (or the single turn) is over either way.
    finish(seq, stop ? FinishReason::kStop : FinishReason::kLength);
  } else if (stop) {
    if (request.multi_turn) {
      end_turn(seq, FinishReason::kStop);
    } else {
      finish(seq, FinishReason::kStop);
    }
  } else if (request.multi_turn && request.turn_max_new_tokens > 0 &&
             static_cast<int64_t>(sample.token_ids.size()) - seq.turn_start >=
                 request.turn_max_new_tokens) {
    end_turn(seq, FinishReason::kLength);
  }
}

bool GenerationEngine::hit_stop_string(const Sequence& seq) const {
  const auto& stops = seq.group->request.sampling.stop_strings;
  if (stops.empty()) return false;
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  // Decode a tail long enough to hold any stop string ending in the newest token.
  // A stop string ends in the current turn (multi-turn: not in an observation).
  const auto& generated = seq.group->samples[seq.index].token_ids;
  const size_t window =
      std::min(generated.size() - static_cast<size_t>(seq.turn_start), longest + 8);
  std::vector<int64_t> tail(generated.end() - window, generated.end());
  absl::StatusOr<std::string> text = context_.tokenizer->decode(tail);
  if (!text.ok()) return false;
  std::vector<int64_t> before(tail.begin(), tail.end() - 1);
  absl::StatusOr<std::string> previous = context_.tokenizer->decode(before);
  for (const std::string& s : stops) {
    // Only a stop string completed by the newest token counts (earlier ones already stopped).
    if (absl::StrContains(*text, s) && !(previous.ok() && absl::StrContains(*previous, s))) {
      return true;
    }
  }
  return false;
}

void GenerationEngine::finish(Sequence& seq, FinishReason reason, const std::string& error) {
  Group* group = seq.group;
  Sample& sample = seq.sample();
  sample.finish_reason = reason;
  sample.error = error;
  if (!seq.routes.empty()) {  // every token of prompt + sample, the ones not run marked
    const size_t width = model_->config().num_moe_layers() * model_->config().num_experts_per_tok;
    seq.routes.resize(seq.tokens.size() * width, kNoRoute);
    sample.routes = std::move(seq.routes);
  }
  const int64_t slot = seq.slot;
  // A failed forward may have written past `cached`: count the whole slot as used.
  dirty_[slot] =
      reason == FinishReason::kError ? options_.max_seq_len : std::max(dirty_[slot], seq.cached);
  slots_[slot].reset();  // `seq` is gone from here on
  --active_;
  if (--group->unfinished == 0) {
    finished_.push_back({group->request.id, group->request.prompt_ids, std::move(group->samples)});
    groups_.erase(group->request.id);
  }
}

void GenerationEngine::fail_active(const std::string& error) {
  for (auto& seq : slots_) {
    if (seq) finish(*seq, FinishReason::kError, error);
  }
}

void GenerationEngine::step() {
  ++stats_.steps;
  try {
    run_step();
  } catch (const std::exception& e) {  // a bug or an allocation failure: keep serving
    fail_active(absl::StrCat("engine step failed: ", e.what()));
  }
}

void GenerationEngine::run_step() {
  // Tensors made here never meet autograd: LibTorch skips its view and version bookkeeping.
  c10::InferenceMode inference;
  apply_pending_update();
  admit();
  extend();
  decode();
}

std::vector<GroupResult> GenerationEngine::take_finished() {
  std::vector<GroupResult> out = std::move(finished_);
  finished_.clear();
  return out;
}

std::vector<GroupResult> GenerationEngine::run_until_idle() {
  while (!idle()) step();
  apply_pending_update();
  return take_finished();
}

absl::Status GenerationEngine::abort(const std::string& request_id) {
  auto it = groups_.find(request_id);
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat("no queued or active request '", request_id, "'"));
  }
  Group* group = it->second.get();
  if (!group->admitted) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), group));
    finished_.push_back({group->request.id, group->request.prompt_ids, {}});
    groups_.erase(it);
    return absl::OkStatus();
  }
  for (auto& seq : slots_) {
    if (seq && seq->group == group) finish(*seq, FinishReason::kAbort);
  }
  return absl::OkStatus();
}

absl::Status GenerationEngine::reset_version(int64_t version) {
  if (!idle()) {
    return absl::FailedPreconditionError("reset_version: the engine still has requests");
  }
  version_ = version;
  staged_.reset();
  return absl::OkStatus();
}

void GenerationEngine::abort_all() {
  std::vector<std::string> ids;
  for (const auto& [id, group] : groups_) ids.push_back(id);
  for (const std::string& id : ids) (void)abort(id);
}

}  // namespace flywheel::rollout
