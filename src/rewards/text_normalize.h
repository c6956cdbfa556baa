// Text normalisation for string-comparing rewards (exact_match).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace flywheel::rewards {

struct TextNormalization {
  bool strip = true;                // drop leading and trailing whitespace
  bool lowercase = false;           // ASCII case folding
  bool collapse_whitespace = true;  // runs of whitespace become one space
  bool remove_punctuation = false;  // drop ASCII punctuation
};

std::string normalize_text(absl::string_view text, const TextNormalization& options);

}  // namespace flywheel::rewards
