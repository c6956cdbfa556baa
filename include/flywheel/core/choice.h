// Closed configuration choices as enums: one spelling table per enum, read and printed by the
// FieldBinder visitors (`FieldBinder::choice`), so a component compares enum values, never
// strings, and an unknown spelling is rejected once, at load.
//
// Each choice enum E declares, in its own namespace (found by argument-dependent lookup):
//   absl::Span<const ChoiceName<E>> choice_names(E);
// listing every value with its spelling, in the order the docs show them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flywheel::core {

template <typename E>
struct ChoiceName {
  E value;
  absl::string_view name;
};

// The spelling of `value` ("?" for a value outside the table, which is a bug).
template <typename E>
absl::string_view choice_name(E value) {
  for (const ChoiceName<E>& c : choice_names(E{})) {
    if (c.value == value) return c.name;
  }
  return "?";
}

// The value spelled `name`, or nullopt.
template <typename E>
std::optional<E> parse_choice(absl::string_view name) {
  for (const ChoiceName<E>& c : choice_names(E{})) {
    if (c.name == name) return c.value;
  }
  return std::nullopt;
}

// Every spelling of E, in table order.
template <typename E>
std::vector<std::string> choice_spellings() {
  std::vector<std::string> out;
  for (const ChoiceName<E>& c : choice_names(E{})) out.emplace_back(c.name);
  return out;
}

// "a, b, c": for error messages.
template <typename E>
std::string choice_list() {
  return absl::StrJoin(choice_spellings<E>(), ", ");
}

}  // namespace flywheel::core
