#include "math/latex_cleaner.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

namespace flywheel::rewards::math {
namespace {

// \text{...} bodies longer than this are not inspected (the command alone is dropped).
constexpr size_t kMaxTextBody = 200;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_one_of(absl::string_view name, std::initializer_list<absl::string_view> names) {
  for (absl::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

bool starts_with_command(absl::string_view s, size_t i, absl::string_view name) {
  if (s.size() - i < name.size() + 1 || s[i] != '\\' || s.substr(i + 1, name.size()) != name) {
    return false;
  }
  const size_t end = i + 1 + name.size();
  return end == s.size() || !is_letter(s[end]);
}

size_t skip_spaces(absl::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// s[i] == '^': the end of "^\circ" / "^{\circ}", else 0.
size_t degree_mark_end(absl::string_view s, size_t i) {
  size_t j = skip_spaces(s, i + 1);
  if (starts_with_command(s, j, "circ")) return j + 5;
  if (j < s.size() && s[j] == '{') {
    size_t k = skip_spaces(s, j + 1);
    if (!starts_with_command(s, k, "circ")) return 0;
    k = skip_spaces(s, k + 5);
    if (k < s.size() && s[k] == '}') return k + 1;
  }
  return 0;
}

// s[i] == '{': the index of its matching '}' within kMaxTextBody bytes, else npos.
size_t short_group_end(absl::string_view s, size_t i) {
  int depth = 0;
  const size_t limit = std::min(s.size(), i + kMaxTextBody);
  for (size_t j = i; j < limit; ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '{') {
      ++depth;
    } else if (s[j] == '}' && --depth == 0) {
      return j;
    }
  }
  return absl::string_view::npos;
}

bool is_plain_text(absl::string_view body) {
  for (char c : body) {
    if (c == '\\' || c == '{' || c == '}') return false;
  }
  return true;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Words that change what the value before them means, so they are never dropped as a unit:
// "5 or more", "5 is wrong", "3 quarters", "2 pi", "5 million", "x^2 plus one".
bool carries_meaning(absl::string_view word) {
  static const std::vector<absl::string_view>* const kWords = [] {
    auto* words = new std::vector<absl::string_view>{
        // Function words, hedges, negations and comparisons.
        "a", "about", "above", "almost", "an", "and", "approx", "approximately", "are", "around",
        "as", "at", "be", "below", "but", "by", "circa", "divided", "down", "either", "else",
        "except", "false", "fewer", "greater", "higher", "if", "incorrect", "is", "larger", "least",
        "less", "likely", "lower", "max", "maximum", "maybe", "minimum", "minus", "more", "most",
        "nearly", "neither", "never", "no", "none", "nor", "not", "of", "or", "otherwise", "over",
        "perhaps", "plus", "possibly", "probably", "roughly", "smaller", "than", "the", "then",
        "times", "to", "under", "up", "was", "were", "with", "without", "wrong",
        // Words with a value or an operation.
        "cos", "cubed", "cubic", "exp", "factorial", "inf", "infinity", "infty", "ln", "log", "mod",
        "pi", "root", "roots", "sin", "sq", "sqrt", "square", "squared", "tan",
        // Number words, ordinals and fraction words.
        "billion", "billions", "dozen", "dozens", "eight", "eighteen", "eighth", "eighths",
        "eighty", "eleven", "eleventh", "elevenths", "fifteen", "fifth", "fifths", "fifty", "five",
        "forty", "four", "fourteen", "fourth", "fourths", "half", "halves", "hundred", "hundreds",
        "hundredth", "hundredths", "million", "millions", "millionth", "millionths", "nine",
        "nineteen", "ninety", "ninth", "ninths", "one", "ones", "quarter", "quarters", "seven",
        "seventeen", "seventh", "sevenths", "seventy", "six", "sixteen", "sixth", "sixths", "sixty",
        "ten", "tens", "tenth", "tenths", "third", "thirds", "thirteen", "thirty", "thousand",
        "thousands", "thousandth", "thousandths", "three", "trillion", "trillions", "twelfth",
        "twelfths", "twelve", "twentieth", "twentieths", "twenty", "two", "zero"};
    std::sort(words->begin(), words->end());
    return words;
  }();
  char buf[16];
  if (word.size() > sizeof(buf)) return false;
  for (size_t i = 0; i < word.size(); ++i) buf[i] = lower(word[i]);
  return std::binary_search(kWords->begin(), kWords->end(), absl::string_view(buf, word.size()));
}

// A unit word: letter runs joined by '/' ("cm", "apples", "km/h"), an optional trailing '.'
// ("ft.") and power ("cm^2", "m/s^{2}"); at least `min_letters` letters and not a word that
// carries meaning.
bool is_unit_word(absl::string_view w, int min_letters) {
  if (w.size() >= 2 && w.back() == '.') w.remove_suffix(1);
  const size_t caret = w.find('^');
  if (caret != absl::string_view::npos) {
    const absl::string_view p = w.substr(caret + 1);
    const bool digit = p.size() == 1 && is_digit(p[0]);
    const bool braced = p.size() == 3 && p[0] == '{' && is_digit(p[1]) && p[2] == '}';
    if (!digit && !braced) return false;
    w = w.substr(0, caret);
  }
  int letters = 0;
  size_t run_begin = 0;
  for (size_t i = 0; i <= w.size(); ++i) {
    if (i == w.size() || w[i] == '/') {
      const absl::string_view run = w.substr(run_begin, i - run_begin);
      if (run.empty() || carries_meaning(run)) return false;
      run_begin = i + 1;
    } else if (is_letter(w[i])) {
      ++letters;
    } else {
      return false;
    }
  }
  return letters >= min_letters;
}

// A unit after a value: one unit word ("cm", "dollars"), a square or cubic one ("square feet",
// "sq ft", "cubic cm"), or a rate ("miles per hour"). Never more than one unit, so "5 or more"
// and "5 is not the answer" are not units.
bool is_unit_phrase(absl::string_view text, int min_letters) {
  absl::string_view words[4];
  int count = 0;
  size_t i = 0;
  while (true) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    if (count == 3) return false;
    size_t e = i;
    while (e < text.size() && !is_space(text[e])) ++e;
    words[count++] = text.substr(i, e - i);
    i = e;
  }
  auto is_word = [](absl::string_view w, absl::string_view name) {
    if (w.size() != name.size()) return false;
    for (size_t k = 0; k < w.size(); ++k) {
      if (lower(w[k]) != name[k]) return false;
    }
    return true;
  };
  switch (count) {
    case 1:
      return is_unit_word(words[0], min_letters);
    case 2:
      return (is_word(words[0], "square") || is_word(words[0], "sq") ||
              is_word(words[0], "cubic") || is_word(words[0], "cu")) &&
             is_unit_word(words[1], 2);
    case 3:
      return is_word(words[1], "per") && is_unit_word(words[0], 2) && is_unit_word(words[2], 2);
    default:
      return false;
  }
}

// What a unit can follow: a number, a closing brace or parenthesis.
bool ends_with_value(absl::string_view out) {
  size_t n = out.size();
  while (n > 0 && out[n - 1] == ' ') --n;
  if (n == 0) return false;
  const char c = out[n - 1];
  return is_digit(c) || c == '}' || c == ')';
}

// After a dropped unit: the end of a "^2" / "^{3}" that belongs to it.
size_t skip_unit_power(absl::string_view s, size_t i) {
  size_t j = skip_spaces(s, i);
  if (j >= s.size() || s[j] != '^') return i;
  j = skip_spaces(s, j + 1);
  if (j < s.size() && is_digit(s[j])) return j + 1;
  if (j + 2 < s.size() && s[j] == '{' && is_digit(s[j + 1]) && s[j + 2] == '}') return j + 3;
  return i;
}

// Whether s[i...] ends the value a unit follows: the end, a separator or a closing bracket
// ("5\text{ or }6" is not a unit).
bool ends_value(absl::string_view s, size_t i) {
  i = skip_spaces(s, i);
  if (i == s.size()) return true;
  const char c = s[i];
  if (c == '\\') {
    const char d = i + 1 < s.size() ? s[i + 1] : '\0';
    return d == ')' || d == ']' || d == '$' || d == '%' || starts_with_command(s, i, "right");
  }
  return c == ',' || c == ')' || c == ']' || c == '}' || c == '.' || c == '$' || c == '%';
}

void push_space(std::string* out) {
  if (!out->empty() && out->back() != ' ') out->push_back(' ');
}

// A thin space ("\,", "\!", U+2009...) before s[next]. Between digits it is a thousands
// separator only inside a valid pattern (a run of 1 to 3 digits, then groups of exactly 3:
// "1\,000\,000"), and is dropped; elsewhere between digits it becomes a space, so "1\,2" is
// not 12. Not between digits ("5\,\mathrm{m}"), it is dropped. `group_start` is where in `out`
// the digits after the last dropped separator begin (npos: none).
void thin_space(absl::string_view s, size_t next, std::string* out, size_t* group_start) {
  if (out->empty() || !is_digit(out->back()) || next >= s.size() || !is_digit(s[next])) return;
  size_t k = next;
  while (k < s.size() && is_digit(s[k]) && k - next <= 3) ++k;
  const bool group_after = k - next == 3 && (k == s.size() || !is_digit(s[k]));
  size_t b = out->size();
  while (b > 0 && is_digit((*out)[b - 1])) --b;
  const size_t run = out->size() - b;
  const bool lead = run <= 3 && (b == 0 || (*out)[b - 1] != '.');
  const bool continued =
      *group_start != std::string::npos && *group_start > b && out->size() - *group_start == 3;
  if (group_after && (lead || continued)) {
    *group_start = out->size();
  } else {
    push_space(out);
  }
}

// Multi-byte UTF-8 signs with a LaTeX meaning; returns the bytes consumed (0: none matched).
size_t replace_unicode(absl::string_view s, size_t i, std::string* out, size_t* group_start) {
  struct Sign {
    absl::string_view utf8;
    absl::string_view latex;  // "" drops it, " " is a space
  };
  static constexpr Sign kSigns[] = {
      {"\xE2\x88\x92", "-"},       {"\xE2\x80\x93", "-"},           {"\xC2\xB0", ""},
      {"\xCF\x80", "\\pi "},       {"\xE2\x88\x9E", "\\infty "},    {"\xC3\x97", "*"},
      {"\xC2\xB7", "*"},           {"\xE2\x8B\x85", "*"},           {"\xC3\xB7", "/"},
      {"\xE2\x88\x9A", "\\sqrt "}, {"\xE2\x88\x85", "\\emptyset "}, {"\xC2\xA0", " "},
      {"\xE2\x80\x89", "\\,"},  // thin spaces
      {"\xE2\x80\xAF", "\\,"},     {"\xE2\x80\x8A", "\\,"},
  };
  for (const Sign& sign : kSigns) {
    if (s.substr(i, sign.utf8.size()) == sign.utf8) {
      if (sign.latex == "\\,") {
        thin_space(s, i + sign.utf8.size(), out, group_start);
      } else if (sign.latex == " ") {
        push_space(out);
      } else {
        out->append(sign.latex.data(), sign.latex.size());
      }
      return sign.utf8.size();
    }
  }
  return 0;
}

void trim_trailing(std::string* out) {
  while (!out->empty() && (out->back() == ' ' || out->back() == '.')) out->pop_back();
}

// "5 cm", "12 apples", "10 square feet": one trailing unit phrase (is_unit_phrase) right after
// a value. At most one is dropped: "5 or more" and "5 is wrong" stay text.
void drop_unit_words(std::string* out) {
  size_t space = out->size();
  for (int words = 1; words <= 3; ++words) {
    space = space == 0 ? std::string::npos : out->rfind(' ', space - 1);
    if (space == std::string::npos || space == 0) return;
    const absl::string_view phrase = absl::string_view(*out).substr(space + 1);
    if (is_unit_phrase(phrase, /*min_letters=*/2) &&
        ends_with_value(absl::string_view(*out).substr(0, space))) {
      out->resize(space);
      trim_trailing(out);
      return;
    }
  }
}

// "x = 5", "\theta = 30", "y \in (1, 2)": a single identifier before the only '='.
void drop_leading_assignment(std::string* out) {
  size_t i = 0;
  const size_t n = out->size();
  if (i < n && (*out)[i] == '\\') ++i;
  const size_t name_begin = i;
  while (i < n && is_letter((*out)[i])) ++i;
  if (i == name_begin || i - name_begin > 8) return;
  if (i + 1 < n && (*out)[i] == '_' && (is_letter((*out)[i + 1]) || is_digit((*out)[i + 1]))) {
    i += 2;
  }
  i = skip_spaces(*out, i);
  size_t rhs = 0;
  if (i < n && (*out)[i] == '=') {
    rhs = i + 1;
  } else if (starts_with_command(*out, i, "in")) {
    rhs = i + 3;
  } else {
    return;
  }
  if (out->find('=', rhs) != std::string::npos) return;
  rhs = skip_spaces(*out, rhs);
  if (rhs >= n) return;
  out->erase(0, rhs);
}

}  // namespace

std::string clean_latex(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  const size_t n = s.size();
  size_t i = 0;
  size_t group_start = std::string::npos;  // see thin_space
  while (i < n) {
    const char c = s[i];
    if (is_space(c) || c == '~') {
      push_space(&out);
      ++i;
      continue;
    }
    if (c == '$' || c == '%') {
      ++i;
      continue;
    }
    if (c == '{' && s.substr(i, 3) == "{,}") {  // "1{,}000"
      out.push_back(',');
      i += 3;
      continue;
    }
    if (c == '^') {
      const size_t end = degree_mark_end(s, i);
      if (end != 0) {
        i = end;
        continue;
      }
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t used = replace_unicode(s, i, &out, &group_start);
      if (used != 0) {
        i += used;
        continue;
      }
    }
    if (c != '\\' || i + 1 == n) {
      out.push_back(c);
      ++i;
      continue;
    }
    const char d = s[i + 1];
    if (!is_letter(d)) {
      i += 2;
      switch (d) {
        case ',':
        case ';':
        case ':':
        case '!':
        case '>':
          thin_space(s, i, &out, &group_start);
          break;
        case '%':
        case '$':
        case '(':  // \( \) \[ \] delimit math
        case ')':
        case '[':
        case ']':
          break;
        case ' ':
          push_space(&out);
          break;
        case '\\':  // a matrix or array row break stays a separator
          out.append("\\\\");
          break;
        default:
          out.push_back('\\');
          out.push_back(d);
      }
      continue;
    }
    size_t j = i + 1;
    while (j < n && is_letter(s[j])) ++j;
    const absl::string_view name = s.substr(i + 1, j - i - 1);
    i = j;
    if (is_one_of(name, {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl",
                         "Bigr", "biggl", "biggr", "Biggl", "Biggr", "middle"})) {
      const size_t k = skip_spaces(s, i);
      if (k < n && s[k] == '.') i = k + 1;
    } else if (is_one_of(name, {"displaystyle", "textstyle", "scriptstyle", "limits", "circ",
                                "degree", "mathdollar"})) {
    } else if (is_one_of(name, {"quad", "qquad"})) {
      push_space(&out);
    } else if (is_one_of(name, {"frac", "dfrac", "tfrac", "cfrac"})) {
      out.append("\\frac");
    } else if (is_one_of(name, {"cdot", "times", "ast"})) {
      out.push_back('*');
    } else if (name == "div") {
      out.push_back('/');
    } else if (name == "lbrace") {
      out.append("\\{");
    } else if (name == "rbrace") {
      out.append("\\}");
    } else if (is_one_of(name, {"varnothing", "emptyset"})) {
      out.append("\\emptyset");
    } else if (is_one_of(name, {"infty", "infin"})) {
      out.append("\\infty");
    } else if (is_one_of(name, {"text", "textrm", "textnormal", "textbf", "textit", "textsf",
                                "texttt", "mbox", "hbox", "mathrm", "mathbf", "mathit", "mathsf",
                                "mathtt", "operatorname"})) {
      const size_t open = skip_spaces(s, i);
      const size_t close =
          open < n && s[open] == '{' ? short_group_end(s, open) : absl::string_view::npos;
      if (close == absl::string_view::npos) {
        i = open;  // the group (or whatever follows) is read on as usual
        continue;
      }
      const absl::string_view body = s.substr(open + 1, close - open - 1);
      if (!is_plain_text(body)) {
        i = open;
        continue;
      }
      i = close + 1;
      const size_t after_unit = skip_unit_power(s, i);
      if (is_unit_phrase(body, /*min_letters=*/1) && ends_with_value(out) &&
          ends_value(s, after_unit)) {
        i = after_unit;
      } else {
        for (char b : body) {
          if (is_space(b)) {
            push_space(&out);
          } else if (b != '$') {
            out.push_back(b);
          }
        }
      }
    } else {
      out.push_back('\\');
      out.append(name.data(), name.size());
      // Keep "\pi r" apart from "\pir" once spaces go.
      if (i < n && (is_space(s[i]) || is_letter(s[i]))) out.push_back(' ');
    }
  }
  while (!out.empty() && out.front() == ' ') out.erase(0, 1);
  trim_trailing(&out);
  drop_unit_words(&out);
  drop_leading_assignment(&out);
  return out;
}

}  // namespace flywheel::rewards::math
