// Added (and special) tokens are matched in the text before anything else, as Hugging Face's
// AddedVocabulary does: leftmost-longest, non-overlapping, honouring lstrip / rstrip /
// single_word.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"

namespace flywheel::model {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched after normalisation (true) or on the raw text (false)
};

// A piece of text: either an added token (id >= 0) or text to tokenize normally (id < 0).
struct TextPiece {
  absl::string_view text;
  int64_t id = -1;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits `text` around matches. Pieces reference `text`.
  std::vector<TextPiece> split(absl::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;
  // First byte -> indices into tokens_, longest content first.
  std::unordered_map<unsigned char, std::vector<size_t>> by_first_byte_;
};

}  // namespace flywheel::model
