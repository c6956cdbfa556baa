#include "key_suggestion.h"

#include <algorithm>

namespace flywheel::core {
namespace {

absl::string_view last_component(absl::string_view path) {
  size_t dot = path.rfind('.');
  return dot == absl::string_view::npos ? path : path.substr(dot + 1);
}

// Distances above this are not worth suggesting: about one typo per three characters.
size_t max_distance(absl::string_view key) { return std::max<size_t>(1, key.size() / 3); }

std::optional<std::string> closest(absl::string_view key, const std::vector<std::string>& paths) {
  std::optional<std::string> best;
  size_t best_distance = max_distance(key) + 1;
  for (const std::string& path : paths) {
    size_t d = edit_distance(key, last_component(path));
    if (d < best_distance) {
      best_distance = d;
      best = path;
    }
  }
  return best;
}

}  // namespace

size_t edit_distance(absl::string_view a, absl::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and adjacent transpositions
  // ("modle" -> "model") each cost 1.
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> suggest_key(absl::string_view bad_path,
                                       const std::vector<std::string>& sibling_paths,
                                       const std::vector<std::string>& all_paths) {
  absl::string_view key = last_component(bad_path);
  if (auto sibling = closest(key, sibling_paths)) return sibling;
  return closest(key, all_paths);
}

}  // namespace flywheel::core
