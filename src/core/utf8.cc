#include "flywheel/core/utf8.h"

namespace flywheel::core {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Valid range of the second byte for lead byte `lead` (Unicode Table 3-7).
void second_byte_range(unsigned char lead, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}

size_t expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Number of bytes of s[i..] that form a valid prefix of a sequence (at least the lead byte).
size_t valid_prefix(absl::string_view s, size_t i, size_t* needed) {
  unsigned char lead = static_cast<unsigned char>(s[i]);
  *needed = expected_length(lead);
  if (*needed <= 1) return 1;
  size_t k = 1;
  if (i + 1 < s.size()) {
    unsigned char lo, hi;
    second_byte_range(lead, &lo, &hi);
    unsigned char c = static_cast<unsigned char>(s[i + 1]);
    if (c < lo || c > hi) return 1;
    k = 2;
    while (k < *needed && i + k < s.size() &&
           is_continuation(static_cast<unsigned char>(s[i + k]))) {
      ++k;
    }
  }
  return k;
}

}  // namespace

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t length = utf8_sequence_length(s, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

size_t utf8_sequence_length(absl::string_view s, size_t i) {
  size_t needed;
  size_t k = valid_prefix(s, i, &needed);
  if (needed == 0) return 0;
  return k == needed ? needed : 0;
}

size_t utf8_invalid_span(absl::string_view s, size_t i) {
  size_t needed;
  return valid_prefix(s, i, &needed);
}

std::string utf8_lossy(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t length = utf8_sequence_length(s, i);
    if (length == 0) {
      out.append("\xEF\xBF\xBD");
      i += utf8_invalid_span(s, i);
    } else {
      out.append(s.data() + i, length);
      i += length;
    }
  }
  return out;
}

}  // namespace flywheel::core
