// The first normalisation step of a math answer: removes LaTeX that does not change its value.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace flywheel::rewards::math {

// Returns `answer` with, in one pass:
// - dropped: `$`, `\left` / `\right` / `\big...` (and the `.` of `\left.`), `\displaystyle`,
//   `%` / `\%`, `\$`, degree marks (`^\circ`, `^{\circ}`, `\circ`, `\degree`, `°`), and thin
//   spaces (`\!`, `\,`, `\;`, `\:`, `\>`, U+2009, U+202F, U+200A) except between digits: there
//   they are dropped only inside a thousands pattern ("1\,000\,000" is "1000000") and are a
//   space otherwise ("1\,2" is "1 2", not 12);
// - one unit after a value: `5\text{ cm}^2`, `3\mbox{ apples}`, "18 dollars", "25 cm^2",
//   "90 km/h", "10 square feet", "60 miles per hour" (one unit word, a square / cubic one, or a
//   rate), never a word that changes the value's meaning (function words such as "or", "not",
//   "is", "at", "more", "plus", "over"; hedges; number, ordinal and fraction words such as
//   "four", "million", "quarters", "fifths"), so "5 or more" and "2 fifths" stay text; other
//   `\text{...}` / `\mathrm{...}` / `\textbf{...}` are unwrapped ("\text{Monday}" is "Monday");
// - rewritten: `\dfrac` / `\tfrac` / `\cfrac` to `\frac`, `\cdot` / `\times` / `×` / `·` to `*`,
//   `\div` to `/`, `−` / `–` to `-`, `π` to `\pi`, `∞` to `\infty`, `√` to `\sqrt`,
//   `\lbrace` / `\rbrace` to `\{` / `\}`, `\varnothing` / `∅` to `\emptyset`;
// - white space collapsed to single spaces and trimmed, a trailing '.' removed, and a leading
//   "x =" / "x \in" (one identifier) removed.
// Other bytes (invalid UTF-8, NULs) are kept as they are. Linear time; no recursion.
std::string clean_latex(absl::string_view answer);

}  // namespace flywheel::rewards::math
