#include "math/math_number.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "math/math_expression.h"

namespace flywheel::rewards::math {
namespace {

std::string literal(absl::string_view text, size_t* used = nullptr) {
  size_t n = 0;
  std::optional<MathNumber> v = MathNumber::parse_literal(text, &n);
  if (used) *used = n;
  return v ? v->to_string() : "none";
}

TEST(MathNumberTest, ParsesDecimalLiteralsExactly) {
  EXPECT_EQ(literal("42"), "42");
  EXPECT_EQ(literal("042.500"), "85/2");
  EXPECT_EQ(literal(".5"), "1/2");
  EXPECT_EQ(literal("0.1"), "1/10");
  EXPECT_EQ(literal("2e3"), "2000");
  EXPECT_EQ(literal("2.5E-2"), "1/40");
  EXPECT_EQ(literal("0000"), "0");
  size_t used = 0;
  EXPECT_EQ(literal("12abc", &used), "12");
  EXPECT_EQ(used, 2u);
  EXPECT_EQ(literal("3.x", &used), "3");  // a '.' without digits is not read
  EXPECT_EQ(used, 1u);
  EXPECT_EQ(literal("7e", &used), "7");
  EXPECT_EQ(used, 1u);
  EXPECT_EQ(literal("x"), "none");
  EXPECT_EQ(literal("."), "none");
}

TEST(MathNumberTest, RefusesLiteralsWithTooManyDigits) {
  EXPECT_EQ(literal(std::string(36, '9')), std::string(36, '9'));
  EXPECT_EQ(literal(std::string(37, '9')), "none");
  EXPECT_EQ(literal(std::string(10000, '7')), "none");
  // Zeros around the significant digits do not count.
  EXPECT_EQ(literal("0.000" + std::string(30, '0') + "1"), "1/" + ("1" + std::string(34, '0')));
  EXPECT_EQ(literal("5" + std::string(10000, '0') + ".0"), "none");  // 5e10000: not finite
  EXPECT_EQ(literal("1e99999"), "none");
  // Not exactly representable: not a number, never a double near one.
  EXPECT_EQ(literal("0." + std::string(40, '0') + "1"), "none");
  EXPECT_EQ(literal("1e-39"), "none");
  EXPECT_EQ(literal("5e40"), "none");
}

TEST(MathNumberTest, DecimalLiteralsKnowTheirPrecision) {
  size_t used = 0;
  EXPECT_DOUBLE_EQ(MathNumber::parse_literal("1.4142135624", &used)->decimal_precision(), 5e-11);
  EXPECT_DOUBLE_EQ(MathNumber::parse_literal("3.140", &used)->decimal_precision(), 5e-4);
  EXPECT_DOUBLE_EQ(MathNumber::parse_literal("2.5e-3", &used)->decimal_precision(), 5e-5);
  EXPECT_EQ(MathNumber::parse_literal("708", &used)->decimal_precision(), 0);
  EXPECT_EQ(MathNumber::parse_literal("7e2", &used)->decimal_precision(), 0);
  EXPECT_DOUBLE_EQ((-*MathNumber::parse_literal("1.5", &used)).decimal_precision(), 0.05);
  EXPECT_EQ(MathNumber::rational(355, 113).decimal_precision(), 0);
}

TEST(MathNumberTest, ArithmeticStaysExactOrIsNotANumber) {
  const MathNumber third = MathNumber::rational(1, 3);
  EXPECT_EQ((third + third + third).to_string(), "1");
  EXPECT_TRUE((third * MathNumber::integer(3)).is_integer());
  // Overflow gives NaN (the answer becomes text), never a rounded double.
  const MathNumber big = MathNumber::rational(static_cast<MathNumber::Int>(1) << 100, 1);
  EXPECT_FALSE((big * big).finite());
  EXPECT_FALSE((big * big + MathNumber::integer(1)).finite());
  EXPECT_FALSE(MathNumber::power(MathNumber::integer(2), MathNumber::integer(200))->finite());
  EXPECT_FALSE(MathNumber::power(MathNumber::integer(10), MathNumber::integer(-40))->finite());
  EXPECT_EQ(MathNumber::power(MathNumber::integer(1), MathNumber::integer(1 << 30))->to_string(),
            "1");
  EXPECT_EQ(MathNumber::power(MathNumber::integer(8), MathNumber::rational(-2, 3))->to_string(),
            "1/4");
  EXPECT_EQ(MathNumber::power(MathNumber::integer(-8), MathNumber::rational(1, 3))->to_string(),
            "-2");
  EXPECT_FALSE(MathNumber::power(MathNumber::integer(2), MathNumber::rational(1, 2))->exact());
  EXPECT_FALSE(MathNumber::divide(third, MathNumber::integer(0)).has_value());
  EXPECT_EQ(MathNumber::power(MathNumber::rational(2, 3), MathNumber::integer(-2))->to_string(),
            "9/4");
  EXPECT_FALSE(MathNumber::power(MathNumber::integer(0), MathNumber::integer(-1)).has_value());
  EXPECT_FALSE(MathNumber::power(MathNumber::integer(-8), MathNumber::rational(1, 2)).has_value());
}

TEST(MathNumberTest, RootsArePerfectPowersExactly) {
  EXPECT_EQ(MathNumber::root(MathNumber::rational(9, 4), 2)->to_string(), "3/2");
  EXPECT_EQ(MathNumber::root(MathNumber::integer(-27), 3)->to_string(), "-3");
  EXPECT_FALSE(MathNumber::root(MathNumber::integer(-4), 2).has_value());
  const MathNumber r2 = *MathNumber::root(MathNumber::integer(2), 2);
  EXPECT_FALSE(r2.exact());
  EXPECT_TRUE((r2 * r2).finite());
}

TEST(MathNumberTest, EqualityIsExactForRationalsAndRelativeOtherwise) {
  EXPECT_TRUE(MathNumber::equal(MathNumber::rational(2, 4), MathNumber::rational(1, 2), 0));
  EXPECT_FALSE(MathNumber::equal(MathNumber::integer(1000000), MathNumber::integer(1000001), 1e-3));
  EXPECT_TRUE(MathNumber::equal(MathNumber::real(1000000), MathNumber::real(1000001), 1e-6));
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(1000000), MathNumber::real(1000002), 1e-6));
  // An integer or a fraction never equals an inexact value, whatever the tolerance.
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(1000000.5), MathNumber::integer(1000000), 0.1));
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(M_PI), MathNumber::rational(355, 113), 0.1));
  // A decimal does when it claims enough digits for the tolerance and is within it.
  size_t used = 0;
  const MathNumber pi_12 = *MathNumber::parse_literal("3.14159265359", &used);
  const MathNumber pi_6 = *MathNumber::parse_literal("3.14159", &used);
  EXPECT_TRUE(MathNumber::equal(MathNumber::real(M_PI), pi_12, 1e-9));
  EXPECT_TRUE(MathNumber::equal(pi_12, MathNumber::real(M_PI), 1e-9));
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(M_PI), pi_6, 1e-9));
  EXPECT_TRUE(MathNumber::equal(MathNumber::real(M_PI), pi_6, 1e-5));
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(M_PI), pi_12, 0));
  EXPECT_FALSE(
      MathNumber::equal(MathNumber::real(std::nan("")), MathNumber::real(std::nan("")), 1));
  EXPECT_TRUE(MathNumber::equal(MathNumber::infinity(false), MathNumber::infinity(false), 1e-6));
  EXPECT_FALSE(MathNumber::equal(MathNumber::infinity(false), MathNumber::infinity(true), 1e-6));
  EXPECT_FALSE(MathNumber::equal(MathNumber::infinity(false), MathNumber::real(1e300), 1e-6));
  EXPECT_FALSE(MathNumber::equal(MathNumber::real(0), MathNumber::real(1e-9), 1e-6));
}

TEST(MathExpressionTest, EvaluatesClosedFormsAndRefusesTheRest) {
  auto eval = [](absl::string_view text) {
    std::optional<MathNumber> v = evaluate_expression(text);
    return v ? v->to_string() : "none";
  };
  EXPECT_EQ(eval("1+2*3"), "7");
  EXPECT_EQ(eval("-2^2"), "-4");
  EXPECT_EQ(eval("2^-1"), "1/2");
  EXPECT_EQ(eval("2\\frac{1}{4}"), "9/4");
  EXPECT_EQ(eval("-2\\frac{1}{4}"), "-9/4");
  EXPECT_EQ(eval("\\frac{12}{8}"), "3/2");
  EXPECT_EQ(eval("\\sqrt{16}"), "4");
  EXPECT_EQ(eval("2(3+1)"), "8");
  EXPECT_EQ(eval("\\sqrt[3]{-8}"), "-2");
  EXPECT_EQ(eval("x"), "none");
  EXPECT_EQ(eval("2x"), "none");
  EXPECT_EQ(eval("2 3"), "none");
  EXPECT_EQ(eval("1,2"), "none");
  EXPECT_EQ(eval("\\frac{1}{0}"), "none");
  EXPECT_EQ(eval("\\sqrt{-1}"), "none");
  EXPECT_EQ(eval("10^{10000}"), "none");
  EXPECT_EQ(eval("(1"), "none");
  EXPECT_EQ(eval(""), "none");
  // Nesting within the limit evaluates; past it, the text is not a number (no deep recursion).
  const int ok_depth = kMaxExpressionDepth / 2 - 2;
  EXPECT_EQ(eval(std::string(ok_depth, '(') + "5" + std::string(ok_depth, ')')), "5");
  EXPECT_EQ(eval(std::string(100000, '(') + "5" + std::string(100000, ')')), "none");
  EXPECT_EQ(eval(std::string(100000, '-') + "5"), "none");
}

}  // namespace
}  // namespace flywheel::rewards::math
