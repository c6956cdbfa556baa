// A math answer parsed into the form it is compared in: a number, a normalised text, a tuple or
// interval, a set, or a bare list.
#pragma once

#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "math/math_number.h"

namespace flywheel::rewards::math {

// Answers longer than this are not normalised: they compare as trimmed raw text (a reference is
// never that long, so such an answer is simply wrong, in bounded time).
constexpr size_t kMaxAnswerBytes = 1000;
// Tuples, sets and lists with more elements than this compare as text.
constexpr size_t kMaxElements = 64;

// One value: a number when it evaluates to one (see evaluate_expression), else normalised text
// (clean_latex, then spaces removed and "\frac12" / "\sqrt3" / "x^{2}" written one way).
struct MathElement {
  std::optional<MathNumber> number;
  std::string text;  // set when number is empty
};

struct MathAnswer {
  enum class Kind {
    kScalar,  // one element: "3", "\frac{1}{2}", "2\sqrt{3}", "x+1", "\text{Monday}"
    kTuple,   // ordered, with its brackets: "(1, 2)", "(1, 2]", "[-\infty, 3)"
    kSet,     // unordered, duplicates collapse: "\{1, 2\}", "\{1, 1\}", "\emptyset"
    kList,    // unordered, no brackets: "1, 2" (e.g. several roots)
  };
  Kind kind = Kind::kScalar;
  char open = 0;   // kTuple: '(' or '['
  char close = 0;  // kTuple: ')' or ']'
  absl::InlinedVector<MathElement, 1> elements;
};

// Parses an extracted answer (a reference or a completion's). Thousands separators ("1,000",
// top level only) are removed; a leading "x =" is dropped; a choice "(B)" is the letter "B";
// "\{\}" and "\{ \}" are the empty set. Never fails: what is not a number is
// text. Bounded: inputs over kMaxAnswerBytes are kept as raw text. Thread-safe.
MathAnswer parse_math_answer(absl::string_view answer);

// A readable canonical form, for tests and debugging: "1/2", "(1,2]", "{1,2}" (sorted), "x+1".
std::string to_string(const MathAnswer& answer);
// parse_math_answer then to_string.
std::string normalize_math_answer(absl::string_view answer);

}  // namespace flywheel::rewards::math
