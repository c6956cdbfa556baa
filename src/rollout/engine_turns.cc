// GenerationEngine's multi-turn samples: a turn that ends keeps its slot and waits; an
// observation appended to it is computed in one forward with the turn's last token (extend()),
// so that every token of an episode goes through the model once.
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "engine_state.h"
#include "flywheel/rollout/engine.h"

namespace flywheel::rollout {

void GenerationEngine::extend() {
  std::vector<Sequence*> rows;
  int64_t longest = 0;
  for (auto& seq : slots_) {
    if (!seq || seq->waiting) continue;
    const int64_t uncached = static_cast<int64_t>(seq->tokens.size()) - seq->cached;
    if (uncached < 2) continue;
    rows.push_back(seq.get());
    longest = std::max(longest, uncached);
  }
  if (rows.empty()) return;
  const int64_t B = rows.size();
  model::ForwardBatch batch;
  batch.tokens = at::zeros({B, longest}, at::kLong);
  batch.positions = at::zeros({B, longest}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    Sequence& seq = *rows[b];
    const int64_t uncached = static_cast<int64_t>(seq.tokens.size()) - seq.cached;
    const std::vector<int64_t> ids(seq.tokens.begin() + seq.cached, seq.tokens.end());
    batch.tokens[b].narrow(0, 0, uncached).copy_(at::tensor(ids, at::kLong));
    batch.positions[b]
        .narrow(0, 0, uncached)
        .copy_(at::arange(seq.cached, seq.cached + uncached, at::kLong));
    batch.slots.push_back(seq.slot);
    batch.lengths.push_back(uncached);
  }
  at::Tensor logits;
  try {
    logits = last_logits(batch, rows);
  } catch (const std::exception& e) {
    for (Sequence* seq : rows) {
      finish(*seq, FinishReason::kError,
             absl::StrCat("prefill of an observation failed: ", e.what()));
    }
    return;
  }
  stats_.prefill_tokens += B * longest;
  for (Sequence* seq : rows) {
    stats_.computed_tokens += static_cast<int64_t>(seq->tokens.size()) - seq->cached;
    seq->cached = static_cast<int64_t>(seq->tokens.size());
  }
  sample_and_append(logits, rows);
}

void GenerationEngine::end_turn(Sequence& seq, FinishReason reason) {
  seq.waiting = true;
  const std::vector<int64_t>& ids = seq.sample().token_ids;
  turn_ends_.push_back({seq.group->request.id, seq.index,
                        std::vector<int64_t>(ids.begin() + seq.turn_start, ids.end()), reason});
}

std::vector<TurnEnd> GenerationEngine::take_turn_ends() {
  std::vector<TurnEnd> out = std::move(turn_ends_);
  turn_ends_.clear();
  return out;
}

GenerationEngine::Sequence* GenerationEngine::waiting_sequence(const std::string& request_id,
                                                               int64_t sample) {
  for (auto& seq : slots_) {
    if (seq && seq->waiting && seq->index == sample && seq->group->request.id == request_id) {
      return seq.get();
    }
  }
  return nullptr;
}

absl::Status GenerationEngine::continue_sample(const std::string& request_id, int64_t sample,
                                               const std::vector<int64_t>& observation) {
  Sequence* seq = waiting_sequence(request_id, sample);
  if (seq == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no sample ", sample, " of request '", request_id, "' waits for a turn"));
  }
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < observation.size(); ++i) {
    if (observation[i] < 0 || observation[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("observation token ", i, " has id ",
                                                     observation[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  Sample& out = seq->sample();
  const int64_t n = static_cast<int64_t>(observation.size());
  if (static_cast<int64_t>(seq->tokens.size()) + n >= options_.max_seq_len ||
      static_cast<int64_t>(out.token_ids.size()) + n >=
          seq->group->request.sampling.max_new_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("an observation of ", n,
                     " tokens leaves no room for the next turn (max_seq_len ", options_.max_seq_len,
                     ", max_new_tokens ", seq->group->request.sampling.max_new_tokens, ")"));
  }
  for (int64_t id : observation) {
    seq->tokens.push_back(id);
    out.token_ids.push_back(id);
    out.logprobs.push_back(0);
    out.versions.push_back(-1);
    out.from_model.push_back(0);
  }
  seq->turn_start = static_cast<int64_t>(out.token_ids.size());
  seq->waiting = false;
  return absl::OkStatus();
}

absl::Status GenerationEngine::end_sample(const std::string& request_id, int64_t sample,
                                          FinishReason reason) {
  Sequence* seq = waiting_sequence(request_id, sample);
  if (seq == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no sample ", sample, " of request '", request_id, "' waits for a turn"));
  }
  finish(*seq, reason);
  return absl::OkStatus();
}

const Sample* GenerationEngine::progress(const std::string& request_id, int64_t sample) const {
  auto it = groups_.find(request_id);
  if (it == groups_.end() || sample < 0 ||
      sample >= static_cast<int64_t>(it->second->samples.size())) {
    return nullptr;
  }
  return &it->second->samples[static_cast<size_t>(sample)];
}

}  // namespace flywheel::rollout
