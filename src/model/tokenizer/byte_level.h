// GPT-2's byte-level alphabet: every byte maps to a printable Unicode character, so that BPE
// works on any byte string. Bytes 33-126, 161-172 and 174-255 map to themselves; the others to
// U+0100 and up, in order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "absl/strings/string_view.h"

namespace flywheel::model {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // UTF-8 of the character for `byte`.
  const std::string& encode_byte(uint8_t byte) const { return byte_to_char_[byte]; }
  // The byte-level string of `text` (each byte -> its character).
  std::string encode(absl::string_view text) const;
  // The byte of a byte-level code point, or -1 when the code point is not in the alphabet.
  int decode_char(uint32_t code_point) const;

 private:
  std::array<std::string, 256> byte_to_char_;
  std::unordered_map<uint32_t, uint8_t> char_to_byte_;
};

}  // namespace flywheel::model
