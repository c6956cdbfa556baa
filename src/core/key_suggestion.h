// "did you mean ...?" for misspelt configuration keys.
#pragma once

#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

namespace flywheel::core {

// Edit distance (optimal string alignment: a swap of two adjacent bytes counts as one edit).
size_t edit_distance(absl::string_view a, absl::string_view b);

// The known full key path closest to `bad_path`, or nullopt when nothing is close.
// Sibling keys (same section) are preferred; otherwise any known path whose last component is
// close to the last component of `bad_path` (so a top-level `lr:` suggests `trainer.lr`).
std::optional<std::string> suggest_key(absl::string_view bad_path,
                                       const std::vector<std::string>& sibling_paths,
                                       const std::vector<std::string>& all_paths);

}  // namespace flywheel::core
