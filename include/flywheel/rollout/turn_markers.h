// The chat template's turn markers as token ids, rendered once per run: what the episode runner
// puts around an environment's text reply so that the next assistant turn starts where the
// template starts it (model/tokenizer/chat_template.h, TurnMarkers).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::model {
struct TokenizerSetup;
}  // namespace flywheel::model

namespace flywheel::rollout {

struct TurnMarkerIds {
  std::vector<int64_t> end_of_turn;  // appended first when the model's turn did not end with it
  std::vector<int64_t> open;
  std::vector<int64_t> close;

  bool empty() const { return end_of_turn.empty() && open.empty() && close.empty(); }
  // `reply` between the markers, for a model turn whose last tokens are `turn_tail`.
  std::vector<int64_t> wrap(const std::vector<int64_t>& reply,
                            const std::vector<int64_t>& turn_tail) const;
};

// The markers of `setup`'s chat template, each tokenized on its own (special tokens as the
// vocabulary has them); none without a template (tokenizer.chat_template: none). Errors name
// the marker that cannot be tokenized.
absl::StatusOr<TurnMarkerIds> turn_marker_ids(const model::TokenizerSetup& setup);

}  // namespace flywheel::rollout
