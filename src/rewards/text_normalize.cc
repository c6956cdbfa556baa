#include "text_normalize.h"

#include "absl/strings/ascii.h"

namespace flywheel::rewards {

std::string normalize_text(absl::string_view text, const TextNormalization& options) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (char c : text) {
    if (options.remove_punctuation && absl::ascii_ispunct(static_cast<unsigned char>(c))) continue;
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (options.collapse_whitespace) {
        pending_space = true;
        continue;
      }
    } else if (pending_space) {
      if (!out.empty() || !options.strip) out.push_back(' ');
      pending_space = false;
    }
    out.push_back(options.lowercase ? absl::ascii_tolower(static_cast<unsigned char>(c)) : c);
  }
  if (pending_space && !options.strip) out.push_back(' ');
  if (options.strip) {
    return std::string(absl::StripAsciiWhitespace(out));
  }
  return out;
}

}  // namespace flywheel::rewards
