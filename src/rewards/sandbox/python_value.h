// Plain Python data (None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset) as
// code_exec compares it outside the solution's process: parsed from a literal of a test
// (`assert f(2) == [1, (2, 'a')]`) or from the tokens the sandbox harness writes for a value
// the solution returned. Comparison is by value with exact types (1 and 1.0 and True
// differ), so an object with an always-true __eq__ can never pass: it is not plain data.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::rewards {

struct PyValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kList,
    kTuple,
    kDict,
    kSet,
    kFrozenSet
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  std::string text;            // int: decimal digits with an optional '-'; str / bytes: bytes
  double number = 0;           // float
  std::vector<PyValue> items;  // list, tuple, set, frozenset; dict: key, value, key, ...

  // A string equal for two values exactly when Python's == holds between them and their types
  // (recursively) are the same: dict entries and set elements in a canonical order, -0.0 as 0.0.
  std::string canonical() const;
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double as_double() const;  // int or float
};

// Parses a Python literal expression: numbers (decimal, 0x / 0o / 0b, underscores, floats with
// fraction or exponent, a leading - or +), strings and bytes (', ", triple quotes, r / b / u
// prefixes, the usual escapes, adjacent literals joined), True, False, None, lists, tuples,
// dicts, sets. InvalidArgument for anything else (names, calls, f-strings, complex numbers).
absl::StatusOr<PyValue> parse_python_literal(absl::string_view text);

// The values the harness writes for what the solution returned, each a prefix-coded token run
// separated by single spaces: "n" (None), "T" / "F", "i<decimal>", "f<float.hex()>",
// "s<hex of the UTF-8>", "y<hex>", "L<n>" / "U<n>" (list / tuple) / "S<n>" / "Z<n>" (set /
// frozenset) followed by n values, "D<n>" followed by n key, value pairs, and "?<hex of a type
// name>" for a value that is not plain data. `count` values are read from `text`, which must
// hold exactly them. InvalidArgument naming what is wrong (e.g. "an object of type Always").
absl::StatusOr<std::vector<PyValue>> python_values_from_text(absl::string_view text, size_t count);

// Python's repr-like text of a value, for messages ("[1, 'a']").
std::string python_repr(const PyValue& value);

}  // namespace flywheel::rewards
