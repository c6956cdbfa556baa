// UTF-8 helpers shared by the JSON writer and the tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace flywheel::core {

// Appends the UTF-8 encoding of `code_point` (<= 0x10FFFF, not a surrogate) to `out`.
void append_utf8(uint32_t code_point, std::string* out);

// Length (1-4) of the well-formed UTF-8 sequence starting at s[i], or 0 when it is invalid
// (bad lead byte, bad continuation, overlong form, surrogate, > U+10FFFF, truncated).
size_t utf8_sequence_length(absl::string_view s, size_t i);

// Bytes to skip for an invalid sequence at s[i] (>= 1): the maximal prefix of a valid
// sequence, as the Unicode "substitution of maximal subparts" rule (and Rust) does.
size_t utf8_invalid_span(absl::string_view s, size_t i);

// Whether `s` is well-formed UTF-8 throughout.
bool is_valid_utf8(absl::string_view s);

// `s` with every invalid sequence replaced by U+FFFD.
std::string utf8_lossy(absl::string_view s);

}  // namespace flywheel::core
