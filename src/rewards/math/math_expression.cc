#include "math/math_expression.h"

#include <cmath>

namespace flywheel::rewards::math {
namespace {

constexpr double kPi = 3.14159265358979323846;

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

using Value = std::optional<MathNumber>;

Value checked(const MathNumber& v) {
  if (!v.finite()) return std::nullopt;
  return v;
}

Value checked(const Value& v) {
  if (!v || !v->finite()) return std::nullopt;
  return v;
}

// Recursive descent with a depth limit; every method returns nullopt on failure and the parse
// stops there.
class ExpressionParser {
 public:
  explicit ExpressionParser(absl::string_view text) : s_(text) {}

  Value parse() {
    Value v = expression();
    peek();
    if (!v || pos_ != s_.size()) return std::nullopt;  // a NUL byte is not the end
    return checked(v);  // an overflowed sum inside (NaN) makes the whole text not a number
  }

 private:
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    bool ok() const { return *depth_ <= kMaxExpressionDepth; }

   private:
    int* depth_;
  };

  char peek() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  // At "\name" (after spaces), not followed by a letter.
  bool at_command(absl::string_view name) {
    if (peek() != '\\') return false;
    if (s_.substr(pos_ + 1, name.size()) != name) return false;
    const size_t end = pos_ + 1 + name.size();
    return end == s_.size() || !is_letter(s_[end]);
  }

  bool eat_command(absl::string_view name) {
    if (!at_command(name)) return false;
    pos_ += name.size() + 1;
    return true;
  }

  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }

  Value expression() {
    DepthGuard guard(&depth_);
    if (!guard.ok()) return std::nullopt;
    Value v = term();
    while (v) {
      const char c = peek();
      if (c != '+' && c != '-') break;
      ++pos_;
      Value r = term();
      if (!r) return std::nullopt;
      v = checked(c == '+' ? *v + *r : *v - *r);
    }
    return v;
  }

  bool at_implicit_factor() {
    const char c = peek();
    return c == '(' || at_command("sqrt") || at_command("pi") || at_command("frac");
  }

  Value term() {
    Value v = unary();
    while (v) {
      const char c = peek();
      if (c == '*') {
        ++pos_;
        Value r = unary();
        if (!r) return std::nullopt;
        v = checked(*v * *r);
      } else if (c == '/') {
        ++pos_;
        Value r = unary();
        if (!r) return std::nullopt;
        v = checked(MathNumber::divide(*v, *r));
      } else if (at_implicit_factor()) {
        Value r = power();
        if (!r) return std::nullopt;
        v = checked(*v * *r);
      } else {
        break;
      }
    }
    return v;
  }

  Value unary() {
    DepthGuard guard(&depth_);
    if (!guard.ok()) return std::nullopt;
    if (eat('-')) {
      Value v = unary();
      if (!v) return std::nullopt;
      return -*v;
    }
    if (eat('+')) return unary();
    return power();
  }

  Value power() {
    Value base = primary();
    if (!base || !eat('^')) return base;
    Value exponent = exponent_argument();
    if (!exponent) return std::nullopt;
    return checked(MathNumber::power(*base, *exponent));
  }

  // "^{...}", "^2", "^10" (a digit run, as plain text means it), "^-1".
  Value exponent_argument() {
    const char c = peek();
    if (c == '{') return group('{', '}');
    if (c == '-') {
      ++pos_;
      if (!is_digit(peek())) return std::nullopt;
      Value v = literal();
      if (!v) return std::nullopt;
      return -*v;
    }
    if (is_digit(c)) return literal();
    return std::nullopt;
  }

  Value group(char open, char close) {
    if (!eat(open)) return std::nullopt;
    Value v = expression();
    if (!v || !eat(close)) return std::nullopt;
    return v;
  }

  Value literal() {
    size_t used = 0;
    Value v = MathNumber::parse_literal(s_.substr(pos_), &used);
    if (v) pos_ += used;
    return v;
  }

  // A \frac argument: a group, one digit (\frac12) or \pi.
  Value frac_argument() {
    const char c = peek();
    if (c == '{') return group('{', '}');
    if (is_digit(c)) {
      ++pos_;
      return MathNumber::integer(c - '0');
    }
    if (eat_command("pi")) return MathNumber::real(kPi);
    return std::nullopt;
  }

  // The text of a \frac argument when it is a plain unsigned integer ("{12}" or "7").
  bool integer_argument(absl::string_view* digits) {
    const char c = peek();
    size_t b = pos_;
    size_t e = pos_;
    if (is_digit(c)) {
      e = b + 1;
      pos_ = e;
    } else if (c == '{') {
      b = pos_ + 1;
      e = b;
      while (e < s_.size() && is_digit(s_[e])) ++e;
      if (e == b || e >= s_.size() || s_[e] != '}') return false;
      pos_ = e + 1;
    } else {
      return false;
    }
    *digits = s_.substr(b, e - b);
    return true;
  }

  // "2\frac{1}{4}" after the integer 2: 2 + 1/4, when both \frac arguments are integers.
  Value mixed_number(const MathNumber& whole) {
    const size_t start = pos_;
    absl::string_view a;
    absl::string_view b;
    size_t used = 0;
    if (eat_command("frac") && integer_argument(&a) && integer_argument(&b)) {
      Value num = MathNumber::parse_literal(a, &used);
      Value den = MathNumber::parse_literal(b, &used);
      if (!num || !den) return std::nullopt;
      Value fraction = MathNumber::divide(*num, *den);
      if (!fraction) return std::nullopt;
      return whole + *fraction;
    }
    pos_ = start;  // "2\frac{\pi}{3}" is a product
    return whole;
  }

  Value primary() {
    const char c = peek();
    if (is_digit(c) || c == '.') {
      Value v = literal();
      if (v && v->is_integer() && at_command("frac")) return mixed_number(*v);
      return v;
    }
    if (c == '(') return group('(', ')');
    if (c == '{') return group('{', '}');
    DepthGuard guard(&depth_);
    if (!guard.ok()) return std::nullopt;
    if (eat_command("frac")) {
      Value num = frac_argument();
      if (!num) return std::nullopt;
      Value den = frac_argument();
      if (!den) return std::nullopt;
      return checked(MathNumber::divide(*num, *den));
    }
    if (eat_command("sqrt")) {
      int degree = 2;
      if (eat('[')) {
        Value index = expression();
        if (!index || !eat(']') || !index->is_integer()) return std::nullopt;
        if (index->value() < 2 || index->value() > 64) return std::nullopt;
        degree = static_cast<int>(index->value());
      }
      Value radicand;
      const char r = peek();
      if (r == '{') {
        radicand = group('{', '}');
      } else if (is_digit(r)) {
        radicand = literal();  // "\sqrt 12" as plain text means it
      } else if (eat_command("pi")) {
        radicand = MathNumber::real(kPi);
      }
      if (!radicand) return std::nullopt;
      return checked(MathNumber::root(*radicand, degree));
    }
    if (eat_command("pi")) return MathNumber::real(kPi);
    return std::nullopt;
  }

  absl::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::optional<MathNumber> evaluate_expression(absl::string_view text) {
  return ExpressionParser(text).parse();
}

}  // namespace flywheel::rewards::math
