// Evaluates a cleaned answer (see clean_latex) that is a constant real number.
#pragma once

#include <optional>

#include "absl/strings/string_view.h"
#include "math/math_number.h"

namespace flywheel::rewards::math {

// Nesting (parentheses, braces, \frac, \sqrt, unary signs) deeper than this is not a number.
constexpr int kMaxExpressionDepth = 48;

// The value of `text` when it is a closed-form constant: decimal literals ("1.5", ".5", "2e3"),
// + - * /, implicit products ("2\sqrt{3}", "3\pi", "2(5)"), powers ("2^{10}", "2^10", "4^{-1/2}"),
// \frac{a}{b} (and \frac12), \sqrt{x} / \sqrt 3 / \sqrt[3]{x}, \pi, parentheses and braces, and
// mixed numbers ("2\frac{1}{4}" is 9/4). nullopt for anything else: a variable, a comma, a
// division by zero, a non-real or non-finite result, exact arithmetic that overflows 128 bits
// ("2^{200}", "10^{-40}"), a literal over kMaxLiteralDigits digits or not exactly representable,
// or nesting past kMaxExpressionDepth. Exact for rationals; a double only for irrational values
// (\pi, roots that are not perfect powers). Bounded recursion;
// linear in the size of `text`. Thread-safe.
std::optional<MathNumber> evaluate_expression(absl::string_view text);

}  // namespace flywheel::rewards::math
