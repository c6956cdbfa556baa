#include "flywheel/rollout/turn_markers.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "flywheel/model/tokenizer/tokenizer_setup.h"

namespace flywheel::rollout {

std::vector<int64_t> TurnMarkerIds::wrap(const std::vector<int64_t>& reply,
                                         const std::vector<int64_t>& turn_tail) const {
  std::vector<int64_t> out;
  const bool closed = turn_tail.size() >= end_of_turn.size() &&
                      std::equal(end_of_turn.begin(), end_of_turn.end(),
                                 turn_tail.end() - static_cast<int64_t>(end_of_turn.size()));
  if (!closed) out = end_of_turn;
  out.insert(out.end(), open.begin(), open.end());
  out.insert(out.end(), reply.begin(), reply.end());
  out.insert(out.end(), close.begin(), close.end());
  return out;
}

absl::StatusOr<TurnMarkerIds> turn_marker_ids(const model::TokenizerSetup& setup) {
  TurnMarkerIds ids;
  if (!setup.chat_template.has_value() || setup.tokenizer == nullptr) return ids;
  const model::TurnMarkers markers = setup.chat_template->turn_markers();
  model::EncodeOptions encode;
  encode.add_special_tokens = false;
  const std::pair<const std::string*, std::vector<int64_t>*> parts[] = {
      {&markers.end_of_turn, &ids.end_of_turn},
      {&markers.open, &ids.open},
      {&markers.close, &ids.close}};
  for (const auto& [text, out] : parts) {
    absl::StatusOr<std::vector<int64_t>> encoded = setup.tokenizer->encode(*text, encode);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", setup.chat_template->name(), " chat template's turn marker '", *text,
                       "' cannot be tokenized: ", encoded.status().message()));
    }
    *out = std::move(*encoded);
  }
  return ids;
}

}  // namespace flywheel::rollout
