#include "math/math_equivalence.h"

#include <cstdint>

namespace flywheel::rewards::math {
namespace {

bool elements_equal(const MathElement& a, const MathElement& b, double rel_tol) {
  if (a.number.has_value() != b.number.has_value()) return false;
  if (a.number) return MathNumber::equal(*a.number, *b.number, rel_tol);
  return !a.text.empty() && a.text == b.text;  // nothing left after normalising is no answer
}

// Each element of `a` matched by a distinct equal element of `b` (greedy; sizes already equal).
bool unordered_equal(const MathAnswer& a, const MathAnswer& b, double rel_tol) {
  uint64_t used = 0;  // kMaxElements <= 64
  for (const MathElement& x : a.elements) {
    bool matched = false;
    for (size_t j = 0; j < b.elements.size() && !matched; ++j) {
      if (!(used >> j & 1) && elements_equal(x, b.elements[j], rel_tol)) {
        used |= uint64_t{1} << j;
        matched = true;
      }
    }
    if (!matched) return false;
  }
  return true;
}

// Sets: every element of `a` equals one of `b` and every element of `b` one of `a`, so duplicates
// collapse ({1, 1} is {1}). At most 2 * kMaxElements^2 comparisons.
bool same_set(const MathAnswer& a, const MathAnswer& b, double rel_tol) {
  auto covered = [rel_tol](const MathAnswer& x, const MathAnswer& y) {
    for (const MathElement& e : x.elements) {
      bool found = false;
      for (size_t j = 0; j < y.elements.size() && !found; ++j) {
        found = elements_equal(e, y.elements[j], rel_tol);
      }
      if (!found) return false;
    }
    return true;
  };
  return covered(a, b) && covered(b, a);
}

}  // namespace

static_assert(kMaxElements <= 64, "unordered_equal keeps a 64-bit mask");

bool math_equivalent(const MathAnswer& a, const MathAnswer& b, double rel_tol) {
  if (a.kind != b.kind) return false;
  if (a.kind == MathAnswer::Kind::kSet) return same_set(a, b, rel_tol);
  if (a.elements.size() != b.elements.size()) return false;
  switch (a.kind) {
    case MathAnswer::Kind::kScalar:
      return elements_equal(a.elements[0], b.elements[0], rel_tol);
    case MathAnswer::Kind::kTuple:
      if (a.open != b.open || a.close != b.close) return false;
      for (size_t i = 0; i < a.elements.size(); ++i) {
        if (!elements_equal(a.elements[i], b.elements[i], rel_tol)) return false;
      }
      return true;
    case MathAnswer::Kind::kSet:  // handled above
    case MathAnswer::Kind::kList:
      return unordered_equal(a, b, rel_tol);
  }
  return false;
}

bool math_answers_equal(absl::string_view reference, absl::string_view answer, double rel_tol) {
  return math_equivalent(parse_math_answer(reference), parse_math_answer(answer), rel_tol);
}

}  // namespace flywheel::rewards::math
