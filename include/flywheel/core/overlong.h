// DAPO's soft overlong punishment (ALGORITHMS.md §5), below both of its users (core holds it so
// that neither includes the other): the `overlong_penalty` reward (rewards) and the algorithms'
// reward shaping (algos): 0 up to max_len - buffer_len generated tokens, then linear down
// to -factor at max_len: min(-(L - (max_len - buffer_len)) / buffer_len * factor, 0), and
// -factor beyond max_len (a completion can exceed max_len when max_len < max_new_tokens). Off
// (0) when buffer_len <= 0.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flywheel::core {

inline double overlong_penalty(int64_t length, int64_t max_len, int64_t buffer_len, double factor) {
  if (buffer_len <= 0) return 0.0;
  const double expected = static_cast<double>(max_len - buffer_len);
  const double penalty = -(static_cast<double>(length) - expected) / buffer_len * factor;
  return std::clamp(penalty, -factor, 0.0);
}

}  // namespace flywheel::core
