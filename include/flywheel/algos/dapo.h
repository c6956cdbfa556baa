// DAPO pieces (ALGORITHMS.md §5): dynamic-sampling group filters and overlong reward shaping.
// Group filters use plain vectors (no LibTorch types) so the buffer can apply them on insert.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::algos {

using GroupFilterParams = std::map<std::string, std::string>;

// Decides whether a scored group is worth training on. Thread-safe (keep() is const).
class GroupFilter {
 public:
  static constexpr char kRegistryKind[] = "group_filter";
  virtual ~GroupFilter() = default;
  virtual bool keep(const std::vector<double>& rewards) const = 0;
};

// DAPO dynamic sampling (verl's rule): keep a group iff it has one response or the population
// std of its rewards is > 0. No parameters.
absl::StatusOr<std::unique_ptr<GroupFilter>> make_nonzero_reward_std(const GroupFilterParams& p);

// Soft overlong punishment: 0 up to max_len - buffer_len generated tokens, then linear down to
// -factor at max_len: min(-(L - (max_len - buffer_len)) / buffer_len * factor, 0).
double overlong_penalty(int64_t length, int64_t max_len, int64_t buffer_len, double factor);

}  // namespace flywheel::algos
