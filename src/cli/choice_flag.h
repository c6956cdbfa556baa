// A flag that takes the spelling of a closed choice (core/choice.h) and sets the enum.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "flywheel/core/choice.h"

namespace flywheel::cli {

// Adds `name` to `command`: its value must be one of E's spellings (CLI11 says which are
// allowed otherwise) and sets *value.
template <typename E>
CLI::Option* add_choice_flag(CLI::App* command, const std::string& name, E* value,
                             const std::string& help) {
  return command
      ->add_option_function<std::string>(
          name, [value](const std::string& s) { *value = *core::parse_choice<E>(s); }, help)
      ->check(CLI::IsMember(core::choice_spellings<E>()));
}

}  // namespace flywheel::cli
