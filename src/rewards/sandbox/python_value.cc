#include "sandbox/python_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/utf8.h"

namespace flywheel::rewards {
namespace {

constexpr int kMaxDepth = 100;
constexpr size_t kMaxIntDigits = 4300;  // Python's own str(int) limit

absl::Status bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not a Python literal: ", why));
}

// Decimal digits of the base-`base` number `digits` (lower-case, no sign, no underscores).
std::string to_decimal(absl::string_view digits, int base) {
  std::vector<uint32_t> limbs = {0};  // little-endian, base 1e9
  for (char c : digits) {
    uint64_t carry = static_cast<uint64_t>(absl::ascii_isdigit(c) ? c - '0' : c - 'a' + 10);
    for (uint32_t& limb : limbs) {
      const uint64_t v = static_cast<uint64_t>(limb) * static_cast<uint64_t>(base) + carry;
      limb = static_cast<uint32_t>(v % 1000000000);
      carry = v / 1000000000;
    }
    if (carry > 0) limbs.push_back(static_cast<uint32_t>(carry));
  }
  std::string out = std::to_string(limbs.back());
  for (size_t i = limbs.size() - 1; i-- > 0;) out += absl::StrFormat("%09u", limbs[i]);
  return out;
}

class LiteralParser {
 public:
  explicit LiteralParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<PyValue> parse() {
    absl::StatusOr<PyValue> value = expression(0);
    if (!value.ok()) return value;
    skip_space();
    if (pos_ != text_.size()) {
      return bad(absl::StrCat("unexpected '", text_.substr(pos_, 20), "'"));
    }
    return value;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
        ++pos_;
      } else if (c == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') {
        pos_ += 2;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::StatusOr<PyValue> expression(int depth) {
    if (depth > kMaxDepth) return bad("nested too deeply");
    skip_space();
    if (pos_ >= text_.size()) return bad("it ends early");
    const char c = text_[pos_];
    if (c == '-' || c == '+') {
      ++pos_;
      absl::StatusOr<PyValue> operand = expression(depth + 1);
      if (!operand.ok()) return operand;
      if (!operand->is_number()) return bad("a sign before something other than a number");
      if (c == '-') negate(&*operand);
      return operand;
    }
    if (absl::ascii_isdigit(c) ||
        (c == '.' && pos_ + 1 < text_.size() && absl::ascii_isdigit(text_[pos_ + 1]))) {
      return number();
    }
    if (c == '[') return sequence(']', PyValue::Kind::kList, depth);
    if (c == '(') return parenthesized(depth);
    if (c == '{') return braces(depth);
    if (absl::ascii_isalpha(c) || c == '_' || c == '\'' || c == '"') return word_or_string();
    return bad(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }

  static void negate(PyValue* v) {
    if (v->kind == PyValue::Kind::kFloat) {
      v->number = -v->number;
    } else if (v->text != "0") {
      v->text = v->text[0] == '-' ? v->text.substr(1) : "-" + v->text;
    }
  }

  absl::StatusOr<PyValue> number() {
    const size_t start = pos_;
    std::string body;
    int base = 10;
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() &&
        std::strchr("xXoObB", text_[pos_ + 1]) != nullptr) {
      const char b = absl::ascii_tolower(text_[pos_ + 1]);
      base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
      pos_ += 2;
    }
    bool is_float = false;
    while (pos_ < text_.size()) {
      const char c = absl::ascii_tolower(text_[pos_]);
      const bool digit = base == 16 ? absl::ascii_isxdigit(c) : absl::ascii_isdigit(c);
      if (digit || c == '_') {
        if (c != '_') body.push_back(c);
        ++pos_;
      } else if (base == 10 && (c == '.' || c == 'e')) {
        is_float = true;
        body.push_back(c);
        ++pos_;
        if (c == 'e' && pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
          body.push_back(text_[pos_++]);
        }
      } else {
        break;
      }
    }
    if (pos_ < text_.size() && (absl::ascii_isalpha(text_[pos_]) || text_[pos_] == '_')) {
      return bad(absl::StrCat("the number '", text_.substr(start, pos_ - start + 1),
                              "' (complex numbers and names are not plain data)"));
    }
    if (body.empty()) return bad("a number without digits");
    PyValue v;
    if (is_float) {
      char* end = nullptr;
      v.kind = PyValue::Kind::kFloat;
      v.number = std::strtod(body.c_str(), &end);
      if (end != body.c_str() + body.size()) return bad(absl::StrCat("the number '", body, "'"));
      return v;
    }
    for (char c : body) {
      const int d = absl::ascii_isdigit(c) ? c - '0' : c - 'a' + 10;
      if (d >= base) return bad(absl::StrCat("the digit '", std::string(1, c), "'"));
    }
    v.kind = PyValue::Kind::kInt;
    v.text = to_decimal(body, base);
    if (v.text.size() > kMaxIntDigits) return bad("an integer of more than 4300 digits");
    return v;
  }

  absl::StatusOr<PyValue> sequence(char close, PyValue::Kind kind, int depth) {
    ++pos_;  // the opening bracket
    PyValue v;
    v.kind = kind;
    while (!take(close)) {
      absl::StatusOr<PyValue> item = expression(depth + 1);
      if (!item.ok()) return item;
      v.items.push_back(std::move(*item));
      if (!take(',')) {
        if (!take(close)) return bad(absl::StrCat("expected ',' or '", std::string(1, close), "'"));
        break;
      }
    }
    return v;
  }

  absl::StatusOr<PyValue> parenthesized(int depth) {
    ++pos_;
    if (take(')')) {
      PyValue empty;
      empty.kind = PyValue::Kind::kTuple;
      return empty;
    }
    absl::StatusOr<PyValue> first = expression(depth + 1);
    if (!first.ok()) return first;
    if (take(')')) return first;  // only parentheses
    if (!take(',')) return bad("expected ',' or ')'");
    PyValue v;
    v.kind = PyValue::Kind::kTuple;
    v.items.push_back(std::move(*first));
    while (!take(')')) {
      absl::StatusOr<PyValue> item = expression(depth + 1);
      if (!item.ok()) return item;
      v.items.push_back(std::move(*item));
      if (!take(',')) {
        if (!take(')')) return bad("expected ',' or ')'");
        break;
      }
    }
    return v;
  }

  absl::StatusOr<PyValue> braces(int depth) {
    ++pos_;
    PyValue v;
    v.kind = PyValue::Kind::kDict;
    if (take('}')) return v;
    bool first = true;
    while (true) {
      absl::StatusOr<PyValue> key = expression(depth + 1);
      if (!key.ok()) return key;
      const bool pair = take(':');
      if (first) v.kind = pair ? PyValue::Kind::kDict : PyValue::Kind::kSet;
      if (pair != (v.kind == PyValue::Kind::kDict)) return bad("a mix of dict and set items");
      v.items.push_back(std::move(*key));
      if (pair) {
        absl::StatusOr<PyValue> value = expression(depth + 1);
        if (!value.ok()) return value;
        v.items.push_back(std::move(*value));
      }
      first = false;
      if (take('}')) break;
      if (!take(',')) return bad("expected ',' or '}'");
      if (take('}')) break;
    }
    return v;
  }

  absl::StatusOr<PyValue> word_or_string() {
    size_t end = pos_;
    while (end < text_.size() && (absl::ascii_isalnum(text_[end]) || text_[end] == '_')) ++end;
    const std::string word(text_.substr(pos_, end - pos_));
    if (end < text_.size() && (text_[end] == '\'' || text_[end] == '"') && word.size() <= 2) {
      std::string prefix = absl::AsciiStrToLower(word);
      if (prefix.find('f') != std::string::npos) return bad("an f-string");
      if (prefix.find_first_not_of("rbu") != std::string::npos) {
        return bad(absl::StrCat("the string prefix '", word, "'"));
      }
      pos_ = end;
      return strings(prefix);
    }
    if (word.empty()) return strings("");
    pos_ = end;
    if (word == "True" || word == "False") {
      PyValue v;
      v.kind = PyValue::Kind::kBool;
      v.boolean = word == "True";
      return v;
    }
    if (word == "None") return PyValue{};
    return bad(absl::StrCat("the name '", word, "' (only literals are plain data)"));
  }

  // One or more adjacent string literals ("a" 'b' joined), all bytes or all str.
  absl::StatusOr<PyValue> strings(std::string prefix) {
    PyValue v;
    v.kind = prefix.find('b') != std::string::npos ? PyValue::Kind::kBytes : PyValue::Kind::kStr;
    while (true) {
      FLYWHEEL_RETURN_IF_ERROR(one_string(prefix, v.kind == PyValue::Kind::kBytes, &v.text));
      skip_space();
      size_t end = pos_;
      while (end < text_.size() && absl::ascii_isalpha(text_[end]) && end - pos_ < 2) ++end;
      if (end >= text_.size() || (text_[end] != '\'' && text_[end] != '"')) break;
      prefix = absl::AsciiStrToLower(text_.substr(pos_, end - pos_));
      if (prefix.find_first_not_of("rbu") != std::string::npos) break;
      if ((prefix.find('b') != std::string::npos) != (v.kind == PyValue::Kind::kBytes)) {
        return bad("bytes and str literals joined");
      }
      pos_ = end;
    }
    return v;
  }

  absl::Status one_string(const std::string& prefix, bool bytes, std::string* out) {
    const bool raw = prefix.find('r') != std::string::npos;
    const char quote = text_[pos_];
    const bool triple = text_.substr(pos_, 3) == std::string(3, quote);
    pos_ += triple ? 3 : 1;
    while (true) {
      if (pos_ >= text_.size()) return bad("an unterminated string");
      const char c = text_[pos_];
      if (c == quote && (!triple || text_.substr(pos_, 3) == std::string(3, quote))) {
        pos_ += triple ? 3 : 1;
        return absl::OkStatus();
      }
      if (c == '\n' && !triple) return bad("a newline in a string");
      if (bytes && static_cast<unsigned char>(c) >= 0x80) return bad("a non-ASCII byte literal");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= text_.size()) return bad("an unterminated string");
      const char e = text_[pos_ + 1];
      if (raw) {
        out->push_back('\\');
        out->push_back(e);
        pos_ += 2;
        continue;
      }
      pos_ += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out->push_back(e);
          break;
        case 'a':
          out->push_back('\a');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'v':
          out->push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          if (e != 'x' && bytes) {
            out->push_back('\\');
            out->push_back(e);
            break;
          }
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > text_.size()) return bad("a short \\x / \\u escape");
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = absl::ascii_tolower(text_[pos_ + i]);
            if (!absl::ascii_isxdigit(h)) return bad("a bad \\x / \\u escape");
            cp = cp * 16 + static_cast<uint32_t>(absl::ascii_isdigit(h) ? h - '0' : h - 'a' + 10);
          }
          pos_ += n;
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return bad("a bad code point");
          if (bytes) {
            out->push_back(static_cast<char>(cp));
          } else {
            core::append_utf8(cp, out);
          }
          break;
        }
        case 'N':
          return bad("a \\N{...} escape");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0;
                 i < 2 && pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '7'; ++i) {
              cp = cp * 8 + static_cast<uint32_t>(text_[pos_++] - '0');
            }
            if (bytes) {
              out->push_back(static_cast<char>(cp & 0xFF));
            } else {
              core::append_utf8(cp, out);
            }
          } else {
            out->push_back('\\');  // Python keeps an unknown escape as it is
            out->push_back(e);
          }
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

std::string float_canonical(double d) {
  if (std::isnan(d)) return "fnan";
  if (d == 0) d = 0;  // -0.0 == 0.0
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  return absl::StrFormat("f%016x", bits);
}

absl::Status value_error(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("the value is not plain data: ", why));
}

// Reads values from the harness's tokens (python_values_from_text).
class TokenReader {
 public:
  explicit TokenReader(absl::string_view text) : tokens_(absl::StrSplit(text, ' ')) {}

  absl::StatusOr<PyValue> value(int depth) {
    if (depth > kMaxDepth) return value_error("nested too deeply");
    if (next_ >= tokens_.size() || tokens_[next_].empty()) return value_error("a value is missing");
    const absl::string_view token = tokens_[next_++];
    const char tag = token[0];
    const absl::string_view rest = token.substr(1);
    PyValue v;
    switch (tag) {
      case 'n':
        if (!rest.empty()) break;
        return v;
      case 'T':
      case 'F':
        if (!rest.empty()) break;
        v.kind = PyValue::Kind::kBool;
        v.boolean = tag == 'T';
        return v;
      case 'i': {
        const size_t digits = rest.size() - (absl::StartsWith(rest, "-") ? 1 : 0);
        if (digits == 0 || digits > kMaxIntDigits ||
            rest.find_first_not_of("0123456789", rest.size() - digits) != absl::string_view::npos) {
          return value_error("a malformed int");
        }
        v.kind = PyValue::Kind::kInt;
        v.text = rest == "-0" ? "0" : std::string(rest);
        return v;
      }
      case 'f': {
        const std::string s(rest);
        char* end = nullptr;
        v.kind = PyValue::Kind::kFloat;
        v.number = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return value_error("a malformed float");
        return v;
      }
      case 's':
      case 'y':
        if (rest.size() % 2 != 0 ||
            rest.find_first_not_of("0123456789abcdef") != absl::string_view::npos) {
          return value_error("malformed text");
        }
        v.kind = tag == 's' ? PyValue::Kind::kStr : PyValue::Kind::kBytes;
        v.text = absl::HexStringToBytes(rest);
        return v;
      case 'L':
      case 'U':
      case 'S':
      case 'Z':
      case 'D': {
        size_t n = 0;
        if (!absl::SimpleAtoi(rest, &n) || n > tokens_.size()) return value_error("a bad length");
        v.kind = tag == 'L'   ? PyValue::Kind::kList
                 : tag == 'U' ? PyValue::Kind::kTuple
                 : tag == 'S' ? PyValue::Kind::kSet
                 : tag == 'Z' ? PyValue::Kind::kFrozenSet
                              : PyValue::Kind::kDict;
        const size_t items = tag == 'D' ? 2 * n : n;
        for (size_t i = 0; i < items; ++i) {
          absl::StatusOr<PyValue> item = value(depth + 1);
          if (!item.ok()) return item;
          v.items.push_back(std::move(*item));
        }
        return v;
      }
      case '?':
        return value_error(absl::StrCat("an object of type ",
                                        absl::HexStringToBytes(rest.substr(0, rest.size() & ~1))));
      default:
        break;
    }
    return value_error(absl::StrCat("the token '", token.substr(0, 20), "'"));
  }

  bool at_end() const { return next_ == tokens_.size(); }

 private:
  std::vector<absl::string_view> tokens_;
  size_t next_ = 0;
};

}  // namespace

std::string PyValue::canonical() const {
  switch (kind) {
    case Kind::kNone:
      return "N";
    case Kind::kBool:
      return boolean ? "T" : "F";
    case Kind::kInt:
      return "i" + text;
    case Kind::kFloat:
      return float_canonical(number);
    case Kind::kStr:
      return absl::StrCat("s", text.size(), ":", text);
    case Kind::kBytes:
      return absl::StrCat("y", text.size(), ":", text);
    case Kind::kList:
    case Kind::kTuple: {
      std::vector<std::string> parts;
      for (const PyValue& item : items) parts.push_back(item.canonical());
      const bool list = kind == Kind::kList;
      return absl::StrCat(list ? "[" : "(", absl::StrJoin(parts, ","), list ? "]" : ")");
    }
    case Kind::kDict: {
      std::map<std::string, std::string> entries;  // the last value of a repeated key wins
      for (size_t i = 0; i + 1 < items.size(); i += 2) {
        entries[items[i].canonical()] = items[i + 1].canonical();
      }
      std::vector<std::string> parts;
      for (const auto& [key, value] : entries) parts.push_back(absl::StrCat(key, "=", value));
      return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
    }
    case Kind::kSet:
    case Kind::kFrozenSet: {
      std::vector<std::string> parts;
      for (const PyValue& item : items) parts.push_back(item.canonical());
      std::sort(parts.begin(), parts.end());
      parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
      const bool frozen = kind == Kind::kFrozenSet;
      return absl::StrCat(frozen ? "<<" : "<", absl::StrJoin(parts, ","), frozen ? ">>" : ">");
    }
  }
  return "?";
}

double PyValue::as_double() const {
  return kind == Kind::kFloat ? number : std::strtod(text.c_str(), nullptr);
}

absl::StatusOr<PyValue> parse_python_literal(absl::string_view text) {
  return LiteralParser(text).parse();
}

absl::StatusOr<std::vector<PyValue>> python_values_from_text(absl::string_view text, size_t count) {
  std::vector<PyValue> out;
  if (count == 0) {
    if (!text.empty()) return value_error("values where none were expected");
    return out;
  }
  TokenReader reader(text);
  for (size_t i = 0; i < count; ++i) {
    FLYWHEEL_ASSIGN_OR_RETURN(PyValue v, reader.value(0));
    out.push_back(std::move(v));
  }
  if (!reader.at_end()) return value_error("more values than expected");
  return out;
}

std::string python_repr(const PyValue& v) {
  auto join = [&](const char* open, const char* close) {
    std::vector<std::string> parts;
    for (const PyValue& item : v.items) parts.push_back(python_repr(item));
    return absl::StrCat(open, absl::StrJoin(parts, ", "), close);
  };
  switch (v.kind) {
    case PyValue::Kind::kNone:
      return "None";
    case PyValue::Kind::kBool:
      return v.boolean ? "True" : "False";
    case PyValue::Kind::kInt:
      return v.text;
    case PyValue::Kind::kFloat:
      return absl::StrFormat("%.17g", v.number);
    case PyValue::Kind::kStr:
      return absl::StrCat("'", absl::CEscape(v.text), "'");
    case PyValue::Kind::kBytes:
      return absl::StrCat("b'", absl::CHexEscape(v.text), "'");
    case PyValue::Kind::kList:
      return join("[", "]");
    case PyValue::Kind::kTuple:
      return v.items.size() == 1 ? absl::StrCat("(", python_repr(v.items[0]), ",)")
                                 : join("(", ")");
    case PyValue::Kind::kDict: {
      std::vector<std::string> parts;
      for (size_t i = 0; i + 1 < v.items.size(); i += 2) {
        parts.push_back(absl::StrCat(python_repr(v.items[i]), ": ", python_repr(v.items[i + 1])));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    case PyValue::Kind::kSet:
      return v.items.empty() ? "set()" : join("{", "}");
    case PyValue::Kind::kFrozenSet:
      return join("frozenset({", "})");
  }
  return "?";
}

}  // namespace flywheel::rewards
