#include "added_tokens.h"

#include <algorithm>

namespace flywheel::model {
namespace {

// Unicode-aware enough for single_word: ASCII alphanumerics and '_' and any non-ASCII byte
// count as word characters.
bool is_word_byte(unsigned char c) {
  return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z');
}

bool is_space_byte(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& [byte, list] : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

std::vector<TextPiece> AddedTokenMatcher::split(absl::string_view text) const {
  std::vector<TextPiece> pieces;
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    auto it = by_first_byte_.find(static_cast<unsigned char>(text[i]));
    const AddedToken* match = nullptr;
    if (it != by_first_byte_.end()) {
      for (size_t index : it->second) {
        const AddedToken& t = tokens_[index];
        if (text.compare(i, t.content.size(), t.content) != 0) continue;
        if (t.single_word) {
          bool left_ok = i == 0 || !is_word_byte(static_cast<unsigned char>(text[i - 1]));
          size_t end = i + t.content.size();
          bool right_ok =
              end >= text.size() || !is_word_byte(static_cast<unsigned char>(text[end]));
          if (!left_ok || !right_ok) continue;
        }
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + match->content.size();
    if (match->lstrip) {
      while (begin > plain_start && is_space_byte(static_cast<unsigned char>(text[begin - 1])))
        --begin;
    }
    if (match->rstrip) {
      while (end < text.size() && is_space_byte(static_cast<unsigned char>(text[end]))) ++end;
    }
    if (begin > plain_start) pieces.push_back({text.substr(plain_start, begin - plain_start), -1});
    pieces.push_back({text.substr(begin, end - begin), match->id});
    plain_start = end;
    i = end;
  }
  if (plain_start < text.size()) pieces.push_back({text.substr(plain_start), -1});
  return pieces;
}

}  // namespace flywheel::model
