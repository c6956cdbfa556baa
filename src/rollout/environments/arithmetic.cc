#include "environments/arithmetic.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace flywheel::rollout {
namespace {

using Int = __int128;

std::string int_string(Int v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    const int d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (negative ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

Int gcd(Int a, Int b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const Int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// An exact rational num/den, den > 0, reduced. The smallest 128-bit integer is never held, so
// negation cannot overflow.
struct Rational {
  Int num = 0;
  Int den = 1;
};

constexpr Int kIntMax = static_cast<Int>((static_cast<unsigned __int128>(1) << 127) - 1);

std::optional<Rational> make(Int num, Int den) {
  if (den == 0 || num < -kIntMax || den < -kIntMax) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Int g = gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return Rational{num, den};
}

std::optional<Int> mul(Int a, Int b) {
  Int out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<Rational> add(const Rational& a, const Rational& b) {
  const std::optional<Int> ad = mul(a.num, b.den), bc = mul(b.num, a.den), bd = mul(a.den, b.den);
  Int sum = 0;
  if (!ad || !bc || !bd || __builtin_add_overflow(*ad, *bc, &sum)) return std::nullopt;
  return make(sum, *bd);
}

std::optional<Rational> multiply(const Rational& a, const Rational& b) {
  // Cross-reduced first, so that exact results that fit are not refused.
  const Int g1 = gcd(a.num, b.den), g2 = gcd(b.num, a.den);
  const Int an = g1 > 1 ? a.num / g1 : a.num, bd = g1 > 1 ? b.den / g1 : b.den;
  const Int bn = g2 > 1 ? b.num / g2 : b.num, ad = g2 > 1 ? a.den / g2 : a.den;
  const std::optional<Int> num = mul(an, bn), den = mul(ad, bd);
  if (!num || !den) return std::nullopt;
  return make(*num, *den);
}

std::string decimal_string(const Rational& r) {
  if (r.den == 1) return int_string(r.num);
  constexpr int kDigits = 12;
  const bool negative = r.num < 0;
  const Int num = negative ? -r.num : r.num;
  std::string out = absl::StrCat(negative ? "-" : "", int_string(num / r.den), ".");
  Int rest = num % r.den;
  for (int i = 0; i < kDigits && rest != 0; ++i) {
    // rest < den: rest * 10 overflows only for denominators of 37 digits; the digits then stop.
    const std::optional<Int> scaled = mul(rest, 10);
    if (!scaled) break;
    out.push_back(static_cast<char>('0' + static_cast<int>(*scaled / r.den)));
    rest = *scaled % r.den;
  }
  while (!out.empty() && out.back() == '0') out.pop_back();
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out == "-0" ? "0" : out;  // a negative value under 1e-12
}

class Parser {
 public:
  Parser(absl::string_view text, const ArithmeticLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<Rational> parse() {
    std::optional<Rational> value = expression(0);
    if (value && (skip_spaces(), pos_ != text_.size())) {
      fail(absl::StrCat("unexpected '", text_.substr(pos_, 1), "'"));
    }
    if (!error_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(error_, " at offset ", error_pos_));
    }
    return *value;
  }

 private:
  std::optional<Rational> fail(const std::string& problem) {
    if (error_.empty()) {
      error_ = problem;
      error_pos_ = pos_;
    }
    return std::nullopt;
  }

  void skip_spaces() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  // Consumes `token` (after spaces) when it is next.
  bool take(absl::string_view token) {
    skip_spaces();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }

  std::optional<Rational> expression(int depth) {
    std::optional<Rational> left = term(depth);
    while (left) {
      const bool plus = take("+");
      if (!plus && !take("-")) break;
      std::optional<Rational> right = term(depth);
      if (!right) return std::nullopt;
      if (!plus) right->num = -right->num;
      left = add(*left, *right);
      if (!left) return fail("result too large");
    }
    return left;
  }

  std::optional<Rational> term(int depth) {
    std::optional<Rational> left = unary(depth);
    while (left) {
      skip_spaces();
      const size_t at = pos_;
      char op = 0;
      if (text_.substr(pos_, 2) != "**" && take("*")) {
        op = '*';
      } else if (take("/")) {
        op = '/';
      } else if (take("%")) {
        op = '%';
      } else {
        break;
      }
      std::optional<Rational> right = unary(depth);
      if (!right) return std::nullopt;
      if (op == '*') {
        left = multiply(*left, *right);
        if (!left) return fail("result too large");
        continue;
      }
      if (right->num == 0) {
        pos_ = at;
        return fail(op == '/' ? "division by zero" : "modulo by zero");
      }
      if (op == '/') {
        left = multiply(*left, Rational{right->den, right->num});
        if (!left) return fail("result too large");
        continue;
      }
      if (left->den != 1 || right->den != 1) {
        pos_ = at;
        return fail("% needs integers");
      }
      Int r = left->num % right->num;  // Python's sign: that of the divisor
      if (r != 0 && ((r < 0) != (right->num < 0))) r += right->num;
      left = Rational{r, 1};
    }
    return left;
  }

  std::optional<Rational> unary(int depth) {
    if (depth > limits_.max_depth) return fail("nested too deeply");
    if (take("-")) {
      std::optional<Rational> v = unary(depth + 1);
      if (v) v->num = -v->num;
      return v;
    }
    if (take("+")) return unary(depth + 1);
    return power(depth);
  }

  std::optional<Rational> power(int depth) {
    std::optional<Rational> base = primary(depth);
    if (!base) return std::nullopt;
    skip_spaces();
    const size_t at = pos_;
    if (!take("^") && !take("**")) return base;
    std::optional<Rational> exponent = unary(depth + 1);
    if (!exponent) return std::nullopt;
    if (exponent->den != 1) {
      pos_ = at;
      return fail("the exponent must be an integer");
    }
    const Int e = exponent->num < 0 ? -exponent->num : exponent->num;
    if (e > 512) {
      pos_ = at;
      return fail("the exponent is too large");
    }
    if (exponent->num < 0 && base->num == 0) {
      pos_ = at;
      return fail("division by zero");
    }
    Rational out{1, 1};
    for (Int i = 0; i < e; ++i) {
      std::optional<Rational> next = multiply(out, *base);
      if (!next) return fail("result too large");
      out = *next;
    }
    if (exponent->num < 0) out = *make(out.den, out.num);
    return out;
  }

  std::optional<Rational> primary(int depth) {
    skip_spaces();
    if (take("(")) {
      std::optional<Rational> inner = expression(depth + 1);
      if (!inner) return std::nullopt;
      if (!take(")")) return fail("missing ')'");
      return inner;
    }
    return number();
  }

  std::optional<Rational> number() {
    skip_spaces();
    const size_t start = pos_;
    Int num = 0, den = 1;
    int digits = 0;
    bool point = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '.' && !point) {
        point = true;
      } else if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        if (++digits > 36) return fail("a number with over 36 digits");
        num = num * 10 + (c - '0');
        if (point) den *= 10;
      } else {
        break;
      }
      ++pos_;
    }
    if (digits == 0) {
      pos_ = start;
      if (pos_ >= text_.size()) return fail("an expression ends too early");
      return fail(absl::StrCat("unexpected '", text_.substr(pos_, 1), "'"));
    }
    return make(num, den);
  }

  absl::string_view text_;
  ArithmeticLimits limits_;
  size_t pos_ = 0;
  std::string error_;
  size_t error_pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> evaluate_arithmetic(absl::string_view expression,
                                                const ArithmeticLimits& limits) {
  if (expression.size() > limits.max_chars) {
    return absl::InvalidArgumentError(
        absl::StrCat("the expression is longer than ", limits.max_chars, " characters"));
  }
  if (absl::StripAsciiWhitespace(expression).empty()) {
    return absl::InvalidArgumentError("the expression is empty");
  }
  absl::StatusOr<Rational> value = Parser(expression, limits).parse();
  if (!value.ok()) return value.status();
  return decimal_string(*value);
}

}  // namespace flywheel::rollout
