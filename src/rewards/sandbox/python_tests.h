// Assertion tests of code_exec, split so that no expected value ever enters the solution's
// process: each `assert` becomes an expression the sandbox evaluates (the solution's side) and
// a judgement made outside it on the plain value that comes back (python_value.h).
//
// Supported forms (anything else is an error naming the statement):
//   assert E == L    assert L == E    (also !=, <, <=, >, >=)   L a literal; == / != by value
//                                                              with exact types, the orderings
//                                                              on numbers or on strings
//   assert E         assert not E                               E exactly True / exactly False
//   assert abs(E - L) < T   (or <=, or abs(L - E))              E a number within T of L
//   assert math.isclose(E, L[, rel_tol=R][, abs_tol=A])         as math.isclose
// with an optional message (`, "msg"`). E must not hold a comparison, `in`, `is`, `and`, `or`,
// a conditional or a lambda at its top level (its truth would come from the solution's
// objects). Other statements (imports, assignments, helper definitions) run in the sandbox
// before the checks that follow them; an `assert` inside a block (def, for, if, with, ...) is
// an error, since it would be judged by the solution's own objects.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/python_value.h"

namespace flywheel::rewards {

struct PyCheck {
  enum class Kind {
    kEqual,
    kNotEqual,
    kLess,
    kLessEqual,
    kGreater,
    kGreaterEqual,
    kTrue,
    kFalse,
    kApprox,
    kIsClose
  };
  Kind kind = Kind::kTrue;
  std::string expression;  // evaluated in the sandbox
  PyValue expected;        // the literal side; kApprox and kIsClose: the value compared with
  double tolerance = 0;    // kApprox: T; kIsClose: rel_tol (default 1e-9)
  double abs_tol = 0;      // kIsClose
  bool inclusive = false;  // kApprox: <= rather than <
  std::string source;      // the assert statement, for messages
};

// A statement of a test: setup code (`code`) run in the sandbox, or a check.
struct PyStep {
  bool is_check = false;
  std::string code;
  PyCheck check;
};

// The steps of one test (one or more statements). InvalidArgument naming the statement for a
// form that cannot be judged outside the solution's process, or a statement that does not
// parse far enough to tell.
absl::StatusOr<std::vector<PyStep>> plan_python_test(absl::string_view test);

// Whether `value` (what the sandbox computed for check.expression) passes `check`.
bool check_passes(const PyCheck& check, const PyValue& value);

}  // namespace flywheel::rewards
