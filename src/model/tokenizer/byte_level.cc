#include "byte_level.h"

#include "flywheel/core/utf8.h"

namespace flywheel::model {

ByteLevelAlphabet::ByteLevelAlphabet() {
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    core::append_utf8(cp, &byte_to_char_[b]);
    char_to_byte_[cp] = static_cast<uint8_t>(b);
  }
}

std::string ByteLevelAlphabet::encode(absl::string_view text) const {
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += byte_to_char_[static_cast<uint8_t>(c)];
  return out;
}

int ByteLevelAlphabet::decode_char(uint32_t code_point) const {
  auto it = char_to_byte_.find(code_point);
  return it == char_to_byte_.end() ? -1 : it->second;
}

}  // namespace flywheel::model
