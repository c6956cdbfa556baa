// Whether two math answers are the same value.
#pragma once

#include "absl/strings/string_view.h"
#include "math/math_normalize.h"

namespace flywheel::rewards::math {

// Equal when both are the same kind and:
// - scalars: both numbers and MathNumber::equal (exact rationals compare exactly; irrational
//   values — radicals, \pi — equal other irrational values within `rel_tol` relative, and a
//   rational only when it is written as a decimal with enough digits), or both text and the
//   normalised texts are equal and not empty; a number never equals a text (overflowed
//   arithmetic such as "2^{200}" is text);
// - tuples and intervals: the same brackets ("(1,2]" is not "[1,2]") and equal element-wise;
// - sets: every element of each equals an element of the other, in any order, so duplicates
//   collapse ({1,1} is {1});
// - bare lists (roots): the same size and each element matched by a distinct equal one, in any
//   order.
// Thread-safe.
bool math_equivalent(const MathAnswer& a, const MathAnswer& b, double rel_tol);

// parse_math_answer on both, then math_equivalent.
bool math_answers_equal(absl::string_view reference, absl::string_view answer, double rel_tol);

}  // namespace flywheel::rewards::math
