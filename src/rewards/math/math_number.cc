#include "math/math_number.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>

namespace flywheel::rewards::math {
namespace {

using Int = MathNumber::Int;

constexpr Int kIntMax = static_cast<Int>((static_cast<unsigned __int128>(1) << 127) - 1);
constexpr Int kIntMin = -kIntMax - 1;
constexpr int kMaxPow10 = 38;            // 10^38 < 2^127
constexpr int kMaxExactPower = 1 << 20;  // larger exponents of an exact base are not numbers
// Below this the double estimate of an integer root is within one of the true root.
constexpr double kRootEstimateExact = 1e6;

Int abs_value(Int v) { return v < 0 ? -v : v; }  // callers exclude kIntMin

Int gcd(Int a, Int b) {
  a = abs_value(a);
  b = abs_value(b);
  while (b != 0) {
    Int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

Int pow10(int e) {
  Int v = 1;
  for (int i = 0; i < e; ++i) v *= 10;
  return v;
}

bool mul_overflows(Int a, Int b, Int* out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(Int a, Int b, Int* out) { return __builtin_add_overflow(a, b, out); }

// Exact base^exponent for exponent >= 0; false on overflow.
bool int_power(Int base, int exponent, Int* out) {
  Int result = 1;
  Int b = base;
  int e = exponent;
  while (e > 0) {
    if (e & 1) {
      if (mul_overflows(result, b, &result)) return false;
    }
    e >>= 1;
    if (e > 0 && mul_overflows(b, b, &b)) return false;
  }
  *out = result;
  return true;
}

// The integer r >= 0 with r^degree == v (v >= 0), if there is one.
bool exact_int_root(Int v, int degree, Int* out) {
  if (v == 0 || v == 1) {
    *out = v;
    return true;
  }
  const double estimate = std::pow(static_cast<double>(v), 1.0 / degree);
  if (!(estimate < 1e37)) return false;
  const Int base = static_cast<Int>(std::nearbyint(estimate));
  if (estimate < kRootEstimateExact) {
    for (Int r = base > 1 ? base - 1 : 0; r <= base + 1; ++r) {
      Int p = 0;
      if (int_power(r, degree, &p) && p == v) {
        *out = r;
        return true;
      }
    }
    return false;
  }
  // Large roots: the double estimate may be off by more than one; bisect around it (at most ~64
  // steps, so (10^19 + 1)^2 is still found to be a perfect square).
  Int lo = static_cast<Int>(estimate * (1 - 1e-9)) - 2;
  Int hi = static_cast<Int>(estimate * (1 + 1e-9)) + 2;
  if (lo < 0) lo = 0;
  while (lo <= hi) {
    const Int mid = lo + (hi - lo) / 2;
    Int p = 0;
    if (!int_power(mid, degree, &p) || p > v) {
      hi = mid - 1;
    } else if (p < v) {
      lo = mid + 1;
    } else {
      *out = mid;
      return true;
    }
  }
  return false;
}

void append_int(Int v, std::string* out) {
  if (v == 0) {
    out->push_back('0');
    return;
  }
  char buf[48];
  int n = 0;
  const bool negative = v < 0;
  unsigned __int128 u =
      negative ? static_cast<unsigned __int128>(-(v + 1)) + 1 : static_cast<unsigned __int128>(v);
  while (u > 0) {
    buf[n++] = static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  }
  if (negative) out->push_back('-');
  while (n > 0) out->push_back(buf[--n]);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Exact arithmetic that overflowed: not a number (never a rounded double that a tolerance could
// match).
MathNumber overflowed() { return MathNumber::real(std::numeric_limits<double>::quiet_NaN()); }

}  // namespace

MathNumber MathNumber::rational(Int num, Int den) {
  if (den == 0 || num == kIntMin || den == kIntMin) return overflowed();
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Int g = gcd(num, den);
  MathNumber n;
  n.exact_ = true;
  n.num_ = num / g;
  n.den_ = den / g;
  n.value_ = static_cast<double>(n.num_) / static_cast<double>(n.den_);
  return n;
}

MathNumber MathNumber::real(double v) {
  MathNumber n;
  n.value_ = v;
  return n;
}

MathNumber MathNumber::infinity(bool negative) { return real(negative ? -HUGE_VAL : HUGE_VAL); }

bool MathNumber::is_infinite() const { return std::isinf(value_); }
bool MathNumber::finite() const { return std::isfinite(value_); }

std::optional<MathNumber> MathNumber::parse_literal(absl::string_view text, size_t* consumed) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && is_digit(text[i])) ++i;
  const size_t int_end = i;
  size_t frac_begin = i;
  size_t frac_end = i;
  if (i + 1 < n && text[i] == '.' && is_digit(text[i + 1])) {
    frac_begin = i + 1;
    i = frac_begin;
    while (i < n && is_digit(text[i])) ++i;
    frac_end = i;
  }
  if (int_end == 0 && frac_end == frac_begin) return std::nullopt;
  int exp10 = 0;
  if (i + 1 < n && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    bool negative = false;
    if (text[j] == '+' || text[j] == '-') {
      negative = text[j] == '-';
      ++j;
    }
    if (j < n && is_digit(text[j])) {
      int e = 0;
      while (j < n && is_digit(text[j])) {
        if (e > 300) return std::nullopt;
        e = e * 10 + (text[j] - '0');
        ++j;
      }
      if (e > 300) return std::nullopt;
      exp10 = negative ? -e : e;
      i = j;
    }
  }
  *consumed = i;

  // All the digits as one sequence D (integer part, then fraction): value = D * 10^scale.
  const size_t int_len = int_end;
  const size_t total = int_len + (frac_end - frac_begin);
  auto digit_at = [&](size_t k) {
    return k < int_len ? text[k] - '0' : text[frac_begin + (k - int_len)] - '0';
  };
  size_t first = 0;
  while (first < total && digit_at(first) == 0) ++first;
  if (first == total) return integer(0);
  size_t last = total - 1;
  while (digit_at(last) == 0) --last;
  if (last - first + 1 > static_cast<size_t>(kMaxLiteralDigits)) return std::nullopt;
  Int mantissa = 0;
  for (size_t k = first; k <= last; ++k) mantissa = mantissa * 10 + digit_at(k);
  const int scale =
      exp10 - static_cast<int>(frac_end - frac_begin) + static_cast<int>(total - 1 - last);
  std::optional<MathNumber> result;
  if (scale >= 0) {
    Int num = 0;
    if (scale <= kMaxPow10 && !mul_overflows(mantissa, pow10(scale), &num)) {
      result = rational(num, 1);
    }
  } else if (-scale <= kMaxPow10) {
    result = rational(mantissa, pow10(-scale));
  }
  // Not exactly representable (1e-41, 5e40): not a number, never a double near one.
  if (!result) return std::nullopt;
  if (frac_end > frac_begin) {
    result->precision_ = 0.5 * std::pow(10.0, exp10 - static_cast<int>(frac_end - frac_begin));
  }
  return result;
}

MathNumber MathNumber::operator-() const {
  MathNumber n = *this;  // keeps exactness and the precision of a negated literal
  n.num_ = -num_;        // num_ != kIntMin: rational() never makes it
  n.value_ = -value_;
  return n;
}

MathNumber operator+(const MathNumber& a, const MathNumber& b) {
  if (a.exact_ && b.exact_) {
    const Int g = gcd(a.den_, b.den_);
    Int l = 0;
    Int r = 0;
    Int num = 0;
    Int den = 0;
    if (!mul_overflows(a.num_, b.den_ / g, &l) && !mul_overflows(b.num_, a.den_ / g, &r) &&
        !add_overflows(l, r, &num) && !mul_overflows(a.den_, b.den_ / g, &den)) {
      return MathNumber::rational(num, den);
    }
    return overflowed();
  }
  return MathNumber::real(a.value_ + b.value_);
}

MathNumber operator-(const MathNumber& a, const MathNumber& b) { return a + (-b); }

MathNumber operator*(const MathNumber& a, const MathNumber& b) {
  if ((a.exact_ && a.num_ == 0 && b.finite()) || (b.exact_ && b.num_ == 0 && a.finite())) {
    return MathNumber::integer(0);
  }
  if (a.exact_ && b.exact_) {
    const Int g1 = gcd(a.num_, b.den_);
    const Int g2 = gcd(b.num_, a.den_);
    Int num = 0;
    Int den = 0;
    if (!mul_overflows(a.num_ / g1, b.num_ / g2, &num) &&
        !mul_overflows(a.den_ / g2, b.den_ / g1, &den)) {
      return MathNumber::rational(num, den);
    }
    return overflowed();
  }
  return MathNumber::real(a.value_ * b.value_);
}

std::optional<MathNumber> MathNumber::divide(const MathNumber& a, const MathNumber& b) {
  if (b.value_ == 0 || (b.exact_ && b.num_ == 0)) return std::nullopt;
  if (b.exact_) return a * rational(b.den_, b.num_);
  return real(a.value_ / b.value_);
}

std::optional<MathNumber> MathNumber::power(const MathNumber& base, const MathNumber& exponent) {
  if (base.exact_ && exponent.exact_) {
    if (exponent.den_ != 1 && exponent.den_ <= 64) {
      // base^(p/q) = (q-th root of base)^p, exact when the root is.
      std::optional<MathNumber> r = root(base, static_cast<int>(exponent.den_));
      if (!r) return std::nullopt;
      if (r->exact_) return power(*r, rational(exponent.num_, 1));
    } else if (exponent.den_ == 1) {
      if (base.num_ == 0 && exponent.num_ < 0) return std::nullopt;
      if (abs_value(exponent.num_) > kMaxExactPower) {
        if (base.num_ == 0 || base.num_ == base.den_) return base;  // 0^n, 1^n
        return overflowed();
      }
      const int e = static_cast<int>(exponent.num_);
      const int m = e < 0 ? -e : e;
      Int num = 0;
      Int den = 0;
      if (int_power(base.num_, m, &num) && int_power(base.den_, m, &den)) {
        return e < 0 ? rational(den, num) : rational(num, den);
      }
      return overflowed();
    }
  }
  if (exponent.is_integer() && abs_value(exponent.num_) <= kMaxExactPower) {
    const int e = static_cast<int>(exponent.num_);
    if (base.value_ == 0 && e < 0) return std::nullopt;
    return real(std::pow(base.value_, static_cast<double>(e)));
  }
  const double v = std::pow(base.value_, exponent.value_);
  if (std::isnan(v)) return std::nullopt;
  return real(v);
}

std::optional<MathNumber> MathNumber::root(const MathNumber& x, int degree) {
  if (degree < 2 || degree > 64) return std::nullopt;
  const bool negative = x.value_ < 0;
  if (negative && degree % 2 == 0) return std::nullopt;
  if (x.exact_ && x.num_ != kIntMin) {
    Int rn = 0;
    Int rd = 0;
    if (exact_int_root(abs_value(x.num_), degree, &rn) && exact_int_root(x.den_, degree, &rd)) {
      return rational(negative ? -rn : rn, rd);
    }
  }
  const double r = std::pow(std::fabs(x.value_), 1.0 / degree);
  return real(negative ? -r : r);
}

bool MathNumber::equal(const MathNumber& a, const MathNumber& b, double rel_tol) {
  if (a.exact_ && b.exact_) return a.num_ == b.num_ && a.den_ == b.den_;
  if (std::isnan(a.value_) || std::isnan(b.value_)) return false;
  if (a.is_infinite() || b.is_infinite()) return a.value_ == b.value_;
  const double scale = std::fmax(std::fmax(std::fabs(a.value_), std::fabs(b.value_)), 1e-6);
  const double tolerance = rel_tol * scale;
  if (a.exact_ || b.exact_) {
    // A rational stands for an irrational only as a decimal that claims enough digits: 355/113
    // and 708 are exact values of their own, not approximations of \pi or \sqrt{501265}.
    const double precision = a.exact_ ? a.precision_ : b.precision_;
    if (precision == 0 || precision > tolerance) return false;
  }
  return std::fabs(a.value_ - b.value_) <= tolerance;
}

std::string MathNumber::to_string() const {
  std::string out;
  if (exact_) {
    append_int(num_, &out);
    if (den_ != 1) {
      out.push_back('/');
      append_int(den_, &out);
    }
    return out;
  }
  if (is_infinite()) return value_ < 0 ? "-inf" : "inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.12g", value_);
  return buf;
}

}  // namespace flywheel::rewards::math
