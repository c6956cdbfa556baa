#include "math/math_normalize.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_join.h"
#include "math/latex_cleaner.h"
#include "math/math_expression.h"

namespace flywheel::rewards::math {
namespace {

using Parts = absl::InlinedVector<absl::string_view, 4>;

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_letter(c) || is_digit(c); }

absl::string_view trim(absl::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The bracket change of the token at s[i] ('(' '[' '{' "\{" open, ')' ']' '}' "\}" close) and
// its length.
int bracket_delta(absl::string_view s, size_t i, size_t* length) {
  const char c = s[i];
  *length = 1;
  if (c == '\\' && i + 1 < s.size()) {
    *length = 2;
    return s[i + 1] == '{' ? 1 : s[i + 1] == '}' ? -1 : 0;
  }
  if (c == '(' || c == '[' || c == '{') return 1;
  if (c == ')' || c == ']' || c == '}') return -1;
  return 0;
}

// The position of the token that closes the bracket opening `s`, or npos.
size_t matching_close(absl::string_view s) {
  int64_t depth = 0;
  size_t length = 1;
  for (size_t i = 0; i < s.size(); i += length) {
    const int delta = bracket_delta(s, i, &length);
    depth += delta;
    if (depth <= 0) return delta < 0 && depth == 0 ? i : absl::string_view::npos;
  }
  return absl::string_view::npos;
}

// Splits `s` at its top-level commas; false when there are more than kMaxElements parts or the
// brackets do not balance.
bool split_top_level(absl::string_view s, Parts* parts) {
  int64_t depth = 0;
  size_t begin = 0;
  size_t length = 1;
  for (size_t i = 0; i < s.size(); i += length) {
    depth += bracket_delta(s, i, &length);
    if (depth < 0) return false;
    if (depth == 0 && s[i] == ',') {
      if (parts->size() == kMaxElements) return false;
      parts->push_back(trim(s.substr(begin, i - begin)));
      begin = i + 1;
    }
  }
  if (depth != 0 || parts->size() == kMaxElements) return false;
  parts->push_back(trim(s.substr(begin)));
  return true;
}

// "1,000", "-12,345,678.5": commas between groups of three digits.
bool is_thousands_number(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const size_t lead = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == lead || i - lead > 3) return false;
  int groups = 0;
  while (i + 3 < s.size() && s[i] == ',' && is_digit(s[i + 1]) && is_digit(s[i + 2]) &&
         is_digit(s[i + 3])) {
    i += 4;
    ++groups;
    if (i < s.size() && is_digit(s[i])) return false;
  }
  if (groups == 0) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t frac = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == frac) return false;
  }
  return i == s.size();
}

// Spaces removed (except one after a command name before a letter, or between digits), "^{2}" as
// "^2", and "\frac12" / "\sqrt3" / "\sqrt x" with braces.
std::string canonical_text(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool in_command = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') {
      // Keep "\pi r" from "\pir" and "1 2" from "12".
      const char next = i + 1 < s.size() ? s[i + 1] : '\0';
      if ((in_command && is_letter(next)) ||
          (!out.empty() && is_digit(out.back()) && is_digit(next))) {
        out.push_back(' ');
      }
      in_command = false;
      continue;
    }
    if ((c == '^' || c == '_') && i + 3 < s.size() && s[i + 1] == '{' && s[i + 3] == '}' &&
        is_alnum(s[i + 2])) {
      out.push_back(c);
      out.push_back(s[i + 2]);
      i += 3;
      in_command = false;
      continue;
    }
    if (c == '\\') {
      const absl::string_view rest = s.substr(i);
      const bool frac = rest.substr(0, 5) == "\\frac" && (rest.size() == 5 || !is_letter(rest[5]));
      const bool sqrt = rest.substr(0, 5) == "\\sqrt" && (rest.size() == 5 || !is_letter(rest[5]));
      if (frac || sqrt) {
        out.append(rest.data(), 5);
        size_t j = i + 5;
        for (int arg = 0; arg < (frac ? 2 : 1); ++arg) {
          while (j < s.size() && s[j] == ' ') ++j;
          if (j >= s.size() || !is_alnum(s[j])) break;
          size_t e = j + 1;
          if (sqrt) {
            while (e < s.size() && is_digit(s[j]) && is_digit(s[e])) ++e;
          }
          out.push_back('{');
          out.append(s.data() + j, e - j);
          out.push_back('}');
          j = e;
        }
        i = j - 1;
        in_command = false;
        continue;
      }
      in_command = true;
      out.push_back(c);
      continue;
    }
    if (!is_letter(c)) in_command = false;
    out.push_back(c);
  }
  return out;
}

MathElement parse_element(absl::string_view s) {
  MathElement element;
  s = trim(s);
  if (s == "\\infty" || s == "+\\infty" || s == "+ \\infty") {
    element.number = MathNumber::infinity(/*negative=*/false);
  } else if (s == "-\\infty" || s == "- \\infty") {
    element.number = MathNumber::infinity(/*negative=*/true);
  } else {
    element.number = evaluate_expression(s);
  }
  if (!element.number) element.text = canonical_text(s);
  return element;
}

void add_elements(const Parts& parts, MathAnswer* answer) {
  for (absl::string_view part : parts) answer->elements.push_back(parse_element(part));
}

std::string element_string(const MathElement& e) {
  return e.number ? e.number->to_string() : e.text;
}

}  // namespace

MathAnswer parse_math_answer(absl::string_view raw) {
  MathAnswer answer;
  if (raw.size() > kMaxAnswerBytes) {
    answer.elements.push_back(MathElement{std::nullopt, std::string(trim(raw))});
    return answer;
  }
  std::string cleaned = clean_latex(raw);
  absl::string_view s = cleaned;
  if (s == "\\emptyset") {
    answer.kind = MathAnswer::Kind::kSet;
    return answer;
  }
  // A multiple-choice letter: "(B)" is "B".
  if (s.size() == 3 && s[0] == '(' && s[1] >= 'A' && s[1] <= 'Z' && s[2] == ')') {
    answer.elements.push_back(MathElement{std::nullopt, std::string(1, s[1])});
    return answer;
  }
  const size_t close = matching_close(s);
  Parts parts;
  if (s.size() >= 4 && s.substr(0, 2) == "\\{" && close == s.size() - 2) {
    const absl::string_view body = trim(s.substr(2, s.size() - 4));
    if (body.empty()) {  // "\{\}", "\{ \}"
      answer.kind = MathAnswer::Kind::kSet;
      return answer;
    }
    if (split_top_level(body, &parts)) {
      answer.kind = MathAnswer::Kind::kSet;
      add_elements(parts, &answer);
      return answer;
    }
  }
  parts.clear();
  if (s.size() >= 2 && (s.front() == '(' || s.front() == '[') &&
      (s.back() == ')' || s.back() == ']') && close == s.size() - 1 &&
      split_top_level(s.substr(1, s.size() - 2), &parts) && parts.size() >= 2) {
    answer.kind = MathAnswer::Kind::kTuple;
    answer.open = s.front();
    answer.close = s.back();
    add_elements(parts, &answer);
    return answer;
  }
  parts.clear();
  if (s.find(',') != absl::string_view::npos) {
    if (is_thousands_number(s)) {
      cleaned.erase(std::remove(cleaned.begin(), cleaned.end(), ','), cleaned.end());
      answer.elements.push_back(parse_element(cleaned));
      return answer;
    }
    if (split_top_level(s, &parts) && parts.size() >= 2) {
      answer.kind = MathAnswer::Kind::kList;
      add_elements(parts, &answer);
      return answer;
    }
  }
  answer.elements.push_back(parse_element(s));
  return answer;
}

std::string to_string(const MathAnswer& answer) {
  std::vector<std::string> items;
  items.reserve(answer.elements.size());
  for (const MathElement& e : answer.elements) items.push_back(element_string(e));
  switch (answer.kind) {
    case MathAnswer::Kind::kScalar:
      return items.empty() ? "" : items[0];
    case MathAnswer::Kind::kTuple:
      return std::string(1, answer.open) + absl::StrJoin(items, ",") + answer.close;
    case MathAnswer::Kind::kSet:
      std::sort(items.begin(), items.end());
      return "{" + absl::StrJoin(items, ",") + "}";
    case MathAnswer::Kind::kList:
      std::sort(items.begin(), items.end());
      return absl::StrJoin(items, ",");
  }
  return "";
}

std::string normalize_math_answer(absl::string_view answer) {
  return to_string(parse_math_answer(answer));
}

}  // namespace flywheel::rewards::math
