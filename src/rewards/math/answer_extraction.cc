#include "math/answer_extraction.h"

#include <string.h>  // memrchr

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace flywheel::rewards::math {
namespace {

// \boxed{ nested deeper than this inside another \boxed{ is read as plain braces.
constexpr int kMaxOpenBoxes = 32;
// A box holding only a box is unwrapped this many times at most (each costs a scan of the box).
constexpr int kMaxUnwrap = 8;
// "answer is" phrases whose text is a comment ("... this answer is correct") are skipped; at most
// this many phrases are read, so 10^5 phrases cost one scan.
constexpr int kMaxAnswerPhrases = 4;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The start of the last occurrence of `needle` in `text` (memrchr on its first byte), or npos.
size_t rfind_fast(absl::string_view text, absl::string_view needle) {
  size_t limit = text.size() >= needle.size() ? text.size() - needle.size() + 1 : 0;
  while (limit > 0) {
    const void* hit = memrchr(text.data(), needle[0], limit);
    if (hit == nullptr) break;
    const size_t at = static_cast<const char*>(hit) - text.data();
    if (text.substr(at, needle.size()) == needle) return at;
    limit = at;
  }
  return absl::string_view::npos;
}

absl::string_view trim(absl::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of "\boxed" / "\fbox" at text[i] (text[i] == '\\'), else 0.
size_t box_command_length(absl::string_view text, size_t i) {
  absl::string_view rest = text.substr(i + 1);
  size_t len = 0;
  if (rest.substr(0, 5) == "boxed") {
    len = 5;
  } else if (rest.substr(0, 4) == "fbox") {
    len = 4;
  } else {
    return 0;
  }
  if (len < rest.size() && is_letter(rest[len])) return 0;  // \boxedfoo is another command
  return len + 1;
}

// One pass over the text with a brace depth counter and a small stack of open boxes; the box that
// closes last wins (the outer one of \boxed{\boxed{1}}, the later one of two in sequence).
// `*end` is the offset just past it.
bool find_last_box(absl::string_view text, absl::string_view* out, size_t* end) {
  int64_t open_depth[kMaxOpenBoxes];
  size_t open_begin[kMaxOpenBoxes];
  int open = 0;
  int64_t depth = 0;
  bool found = false;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (open > 0 && depth == open_depth[open - 1]) {
        --open;
        *out = text.substr(open_begin[open], i - open_begin[open]);
        *end = i + 1;
        found = true;
      }
      --depth;
    } else if (c == '\\' && i + 1 < n) {
      const size_t len = box_command_length(text, i);
      if (len == 0) {
        ++i;  // an escaped character (\{, \}, \\) or another command's first letter
        continue;
      }
      size_t j = i + len;
      while (j < n && is_space(text[j])) ++j;
      if (j < n && text[j] == '{') {
        ++depth;
        if (open < kMaxOpenBoxes) {
          open_depth[open] = depth;
          open_begin[open] = j + 1;
          ++open;
        }
        i = j;
      } else if (j > i + len ||
                 (j < n && (is_digit(text[j]) || text[j] == '-' || text[j] == '.'))) {
        // "\boxed 5", "\boxed5": one token, up to a space or '$'
        size_t token_end = j;
        while (token_end < n && !is_space(text[token_end]) && text[token_end] != '$') ++token_end;
        if (token_end > j) {
          *out = text.substr(j, token_end - j);
          *end = token_end;
          found = true;
        }
        i = token_end - 1;
      } else {
        i = j - 1;
      }
    }
  }
  return found;
}

// "\boxed{\boxed{5}}" and "\boxed{ \fbox{5} }" are "5": a box that holds only a box is unwrapped.
absl::string_view unwrap_boxes(absl::string_view answer) {
  for (int k = 0; k < kMaxUnwrap; ++k) {
    const absl::string_view t = trim(answer);
    if (t.size() < 2 || t[0] != '\\') break;
    const size_t len = box_command_length(t, 0);
    if (len == 0) break;
    size_t j = len;
    while (j < t.size() && is_space(t[j])) ++j;
    const size_t content = j < t.size() && t[j] == '{' ? j + 1 : j;
    absl::string_view inner;
    size_t end = 0;
    // The box that closes last must be the one that opens first and end the text.
    if (!find_last_box(t, &inner, &end) || end != t.size() || inner.data() != t.data() + content) {
      break;
    }
    answer = inner;
  }
  return answer;
}

// Where a candidate answer came from and the span of text that stated it.
struct Candidate {
  absl::string_view text;
  size_t begin = 0;  // the marker ("####", "answer is")
  size_t end = 0;    // just past the answer
};

bool find_after_hashes(absl::string_view text, Candidate* out) {
  const size_t at = rfind_fast(text, "####");
  if (at == absl::string_view::npos) return false;
  absl::string_view rest = text.substr(at + 4);
  const size_t line_end = std::min(rest.find('\n'), rest.size());
  rest = trim(rest.substr(0, line_end));
  if (rest.empty()) return false;
  out->text = rest;
  out->begin = at;
  out->end = at + 4 + line_end;
  return true;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr absl::string_view kPhrase = "answer is";

// The start of the last whole "answer is" (case-insensitive) that begins before `limit`, or npos.
size_t rfind_phrase(absl::string_view text, size_t limit) {
  if (text.size() < kPhrase.size()) return absl::string_view::npos;
  for (size_t i = std::min(limit, text.size() - kPhrase.size() + 1); i-- > 0;) {
    size_t k = 0;
    while (k < kPhrase.size() && lower(text[i + k]) == kPhrase[k]) ++k;
    if (k == kPhrase.size() && (i == 0 || !is_letter(text[i - 1]))) return i;
  }
  return absl::string_view::npos;
}

// Whether a '$' at text[i] is a currency sign: followed by a digit and never closed on its line
// ("The answer is $18. I hope this helps!").
bool is_currency(absl::string_view text, size_t i) {
  if (i + 1 >= text.size() || !is_digit(text[i + 1])) return false;
  for (size_t k = i + 1; k < text.size() && text[k] != '\n'; ++k) {
    if (text[k] == '$') return false;
  }
  return true;
}

// "... this answer is correct.": a comment on an answer, not an answer.
bool is_comment(absl::string_view answer) {
  size_t n = 0;
  char word[12];
  while (n < answer.size() && n < sizeof(word) && is_letter(answer[n])) {
    word[n] = lower(answer[n]);
    ++n;
  }
  if (n == 0 || n == sizeof(word) || (n < answer.size() && is_letter(answer[n]))) return false;
  const absl::string_view w(word, n);
  for (absl::string_view comment :
       {"correct", "incorrect", "right", "wrong", "above", "below", "shown", "given", "as", "that",
        "clear", "obvious", "boxed", "indeed", "verified", "confirmed", "consistent", "valid"}) {
    if (w == comment) return true;
  }
  return false;
}

// Text after the last "answer is" up to the end of its sentence: a newline, or a '.' followed by
// white space or the end, outside $...$ and braces (so "3.5" and "$\frac{1}{2}.$" stay whole; a
// '$' that is currency opens no math, and escaped characters such as "\$" are skipped).
bool find_after_answer_is(absl::string_view text, Candidate* out) {
  size_t limit = text.size();
  for (int tries = 0; tries < kMaxAnswerPhrases; ++tries) {
    const size_t at = rfind_phrase(text, limit);
    if (at == absl::string_view::npos) return false;
    limit = at;
    size_t b = at + kPhrase.size();
    while (b < text.size() && (is_space(text[b]) || text[b] == ':') && text[b] != '\n') ++b;
    size_t e = b;
    bool in_math = false;
    int64_t depth = 0;
    for (; e < text.size(); ++e) {
      const char c = text[e];
      if (c == '\n') break;
      if (c == '\\' && e + 1 < text.size() && text[e + 1] != '\n') {
        ++e;
        continue;
      }
      if (c == '$' && (in_math || !is_currency(text, e))) in_math = !in_math;
      if (c == '{') ++depth;
      if (c == '}') --depth;
      if (c == '.' && !in_math && depth <= 0 && (e + 1 == text.size() || is_space(text[e + 1]))) {
        break;
      }
    }
    const absl::string_view answer = trim(text.substr(b, e - b));
    if (answer.empty()) return false;
    if (is_comment(answer)) continue;
    out->text = answer;
    out->begin = at;
    out->end = e;
    return true;
  }
  return false;
}

// The last run of digits with its sign, decimal point, thousands commas and a "/" between digits.
bool find_last_number(absl::string_view text, absl::string_view* out) {
  size_t end = text.size();
  while (end > 0 && !is_digit(text[end - 1])) --end;
  if (end == 0) return false;
  size_t begin = end;
  while (begin > 0) {
    const char c = text[begin - 1];
    if (is_digit(c)) {
      --begin;
    } else if ((c == ',' || c == '.' || c == '/') && begin >= 2 && is_digit(text[begin - 2])) {
      --begin;
    } else {
      break;
    }
  }
  if (begin > 0 && text[begin - 1] == '-') --begin;
  *out = text.substr(begin, end - begin);
  return true;
}

}  // namespace

ExtractedAnswer extract_answer(absl::string_view text, bool fallback_to_last_number) {
  // A reasoning model's final answer follows its thinking; what it tried inside does not count.
  static constexpr absl::string_view kEndThink = "</think>";
  const size_t think = rfind_fast(text, kEndThink);
  if (think != absl::string_view::npos) text = text.substr(think + kEndThink.size());

  ExtractedAnswer answer;
  absl::string_view box;
  size_t box_end = 0;
  const bool boxed = find_last_box(text, &box, &box_end);
  // The answer stated last wins. A "####" or "answer is" that starts before the box ends either
  // holds the box ("The answer is \boxed{5}.") or ends before it, so only the text after the box
  // can hold a later one.
  const absl::string_view rest = text.substr(boxed ? box_end : 0);
  Candidate hashes;
  Candidate stated;
  const bool has_hashes = find_after_hashes(rest, &hashes);
  // A phrase that starts before the "####" ends no later than it: only the text after counts.
  const size_t from = has_hashes ? hashes.begin : 0;
  const bool has_stated = find_after_answer_is(rest.substr(from), &stated);
  stated.begin += from;
  stated.end += from;
  // Of the two, the one that ends last, or on a tie the inner one ("#### The answer is 7").
  const bool stated_wins =
      has_stated && (!has_hashes || stated.end > hashes.end ||
                     (stated.end == hashes.end && stated.begin > hashes.begin));
  if (stated_wins) {
    answer.text = stated.text;
    answer.source = AnswerSource::kAnswerIs;
  } else if (has_hashes) {
    answer.text = hashes.text;
    answer.source = AnswerSource::kHashes;
  } else if (boxed) {
    answer.text = unwrap_boxes(box);
    answer.source = AnswerSource::kBoxed;
  } else if (fallback_to_last_number && find_last_number(text, &answer.text)) {
    answer.source = AnswerSource::kLastNumber;
  } else {
    answer.text = absl::string_view();
  }
  return answer;
}

const char* answer_source_name(AnswerSource source) {
  switch (source) {
    case AnswerSource::kNone:
      return "none";
    case AnswerSource::kBoxed:
      return "boxed";
    case AnswerSource::kHashes:
      return "####";
    case AnswerSource::kAnswerIs:
      return "answer is";
    case AnswerSource::kLastNumber:
      return "last number";
  }
  return "none";
}

}  // namespace flywheel::rewards::math
