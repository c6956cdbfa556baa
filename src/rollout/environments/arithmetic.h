// The calculator environment's evaluator: a small, safe arithmetic language, no shell and no
// host language. Integer and decimal literals ("12", "3.25", ".5"), + - * / %, powers (^ or **,
// right-associative, binding tighter than a unary sign: -2^2 is -4), parentheses and spaces.
// Arithmetic is exact, on rationals of 128-bit integers.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::rollout {

struct ArithmeticLimits {
  size_t max_chars = 200;  // longer expressions are refused before parsing
  int max_depth = 32;      // nesting of parentheses and signs
};

// The value of `expression`: an integer in decimal ("-1407"), else a decimal with up to 12
// digits after the point, trailing zeros dropped ("0.333333333333", "2.5"). InvalidArgument
// naming the problem and its byte offset for anything else: a syntax error, a division or a
// modulo by zero, % of non-integers, a non-integer or too large exponent, a result (or an
// intermediate value) past 128 bits, or limits exceeded. Thread-safe.
absl::StatusOr<std::string> evaluate_arithmetic(absl::string_view expression,
                                                const ArithmeticLimits& limits = {});

}  // namespace flywheel::rollout
