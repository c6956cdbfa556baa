// A real number for answer checking: an exact rational (128-bit numerator and denominator), or a
// double for values that are not rational (\pi, roots that are not perfect powers, powers with
// an irrational exponent). Operations never throw or trap. Exact arithmetic that overflows gives
// NaN, not a rounded double: such a value is not a number at all (the caller compares the answer
// as text), so "2^{200}" never equals "2^{200}+1" within a tolerance.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace flywheel::rewards::math {

// A literal keeps at most this many significant digits; longer ones are not numbers (they are
// compared as text), so 10^4-digit inputs cost nothing and never round to a false match.
constexpr int kMaxLiteralDigits = 36;

class MathNumber {
 public:
  using Int = __int128;

  // The exact rational num/den (den != 0; reduced and made positive here).
  static MathNumber rational(Int num, Int den);
  static MathNumber integer(long long v) { return rational(v, 1); }
  static MathNumber real(double v);  // inexact
  static MathNumber infinity(bool negative);

  // Parses an unsigned decimal literal: digits, optional '.', digits (".5", "2.", "007"), and an
  // optional exponent ("e-3", "E+12", |exponent| <= 300). Returns the exact number and the bytes
  // read, or nullopt when `text` does not start with one, it has over kMaxLiteralDigits
  // significant digits, or its value does not fit an exact rational (1e-41, 1e40).
  static std::optional<MathNumber> parse_literal(absl::string_view text, size_t* consumed);

  bool exact() const { return exact_; }
  bool is_integer() const { return exact_ && den_ == 1; }
  bool is_infinite() const;
  bool finite() const;  // not infinite and not NaN
  double value() const { return value_; }
  Int num() const { return num_; }  // meaningful only when exact()
  Int den() const { return den_; }
  // For a literal written with digits after a point ("1.4142135624", "-3.140", "2.5e-3"): half a
  // unit in its last written digit (5e-11, 5e-4, 5e-5), the precision it claims; else 0.
  double decimal_precision() const { return precision_; }

  MathNumber operator-() const;
  friend MathNumber operator+(const MathNumber& a, const MathNumber& b);
  friend MathNumber operator-(const MathNumber& a, const MathNumber& b);
  friend MathNumber operator*(const MathNumber& a, const MathNumber& b);
  // nullopt for a division by zero.
  static std::optional<MathNumber> divide(const MathNumber& a, const MathNumber& b);
  // Exact for an exact base with an integer exponent, or a rational exponent p/q when the base is
  // a perfect q-th power (8^{2/3} = 4); NaN when that exact result overflows; else std::pow.
  // nullopt when not a real number.
  static std::optional<MathNumber> power(const MathNumber& base, const MathNumber& exponent);
  // The principal `degree`-th root (odd degrees accept negatives); exact for perfect powers of
  // small rationals (sqrt(9/4) = 3/2); nullopt when not real.
  static std::optional<MathNumber> root(const MathNumber& x, int degree);

  // - both exact: equal exactly (rel_tol is not used);
  // - both inexact: |a - b| <= rel_tol * max(|a|, |b|, 1e-6) (infinities equal only infinities
  //   of the same sign; NaN equals nothing);
  // - one exact, one inexact (say 1.4142135624 and \sqrt{2}): equal only when the exact one is a
  //   decimal literal whose decimal_precision() is within rel_tol * |inexact| and the two are
  //   within that tolerance. A fraction or an integer never equals an inexact value, so neither
  //   355/113 nor 708 ever equals \pi or \sqrt{501265}, whatever the tolerance.
  static bool equal(const MathNumber& a, const MathNumber& b, double rel_tol);

  // "3", "-1/2", "0.333333333333" (inexact), "inf", "-inf".
  std::string to_string() const;

 private:
  MathNumber() = default;
  bool exact_ = false;
  Int num_ = 0;
  Int den_ = 1;
  double value_ = 0;
  double precision_ = 0;
};

}  // namespace flywheel::rewards::math
