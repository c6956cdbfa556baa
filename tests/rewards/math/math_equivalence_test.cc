#include "math/math_equivalence.h"

#include <string>

#include "flywheel/core/json.h"
#include "gtest/gtest.h"
#include "math/math_normalize.h"
#include "math/math_reward.h"

namespace flywheel::rewards::math {
namespace {

// The reward's default, so both tests below see the same rows the same way.
const double kTolerance = MathRewardOptions{}.tolerance;

struct EquivalenceCase {
  const char* reference;
  const char* answer;
  bool equal;
  const char* reason;
};

// Every row is also scored through the `math` reward, with the answer in a \boxed{} at the end
// of a chain of thought.
const EquivalenceCase kEquivalenceCases[] = {
    // Integers and decimals.
    {"42", "42", true, "identical integers"},
    {"12", "123", false, "a prefix of a longer number is not the number"},
    {"123", "12", false, "a number is not its prefix"},
    {"42", "42.0", true, "a trailing zero after the point"},
    {"42", "42.000", true, "several trailing zeros"},
    {"42", "042", true, "a leading zero"},
    {"0.5", "0.50", true, "a trailing zero in a decimal"},
    {"0.5", ".5", true, "no leading zero"},
    {"0.5", "0.05", false, "a different decimal"},
    {"1.5", "15", false, "the decimal point matters"},
    {"3", "3.01", false, "close but not equal"},
    {"7", "7.", true, "a trailing period"},
    {"0", "0.0", true, "zero written as a decimal"},
    {"0", "-0", true, "negative zero is zero"},
    {"1000000", "1000001", false, "integers compare exactly, not within the relative tolerance"},
    {"12345678901234567890", "12345678901234567890", true, "20-digit integers"},
    {"12345678901234567890", "12345678901234567891", false, "20-digit integers compare exactly"},
    {"1", "0.999999999", false, "a decimal is an exact rational, not an approximation"},
    {"0.3", "0.1+0.2", true, "decimal arithmetic is exact"},
    {"2e3", "2000", true, "scientific notation"},
    {"1500", "1.5\\times10^{3}", true, "times ten to a power"},
    {"1500", "1.5 \\cdot 10^3", true, "cdot and an unbraced exponent"},
    {"5", "5.5", false, "a different value"},
    {"5", "", false, "an empty answer"},
    {"\\text{}", "\\left.\\right.", false, "answers that normalise to nothing never match"},
    {"5", "five", false, "number words are not read"},
    {"10", "10!", false, "a factorial is not evaluated"},
    {"123456789012345678901234567890123456789012", "123456789012345678901234567890123456789012",
     true, "42-digit numbers compare as text"},
    {"123456789012345678901234567890123456789012", "123456789012345678901234567890123456789013",
     false, "42-digit numbers differing in the last digit"},
    {"123456789012345678901234567890123456789012", "1.23456789012345678901234567890123456789012e41",
     false, "over-long literals are not rounded into a match"},
    // Thousands separators.
    {"1000", "1,000", true, "a thousands separator"},
    {"1234567", "1,234,567", true, "two thousands separators"},
    {"1234.5", "1,234.5", true, "a separator with decimals"},
    {"-1000", "-1,000", true, "a negative number with a separator"},
    {"1000", "1\\,000", true, "a LaTeX thin space as separator"},
    {"1000", "1{,}000", true, "a LaTeX braced comma as separator"},
    {"1000", "1\\!000", true, "a negative thin space is dropped"},
    {"1000", "1,00", false, "a malformed group is a list, not 1000"},
    {"1234", "12,34", false, "groups of two are not thousands"},
    {"1000", "10,00", false, "misplaced separator"},
    {"\\{1,234\\}", "\\{1234\\}", false, "inside a set a comma separates elements"},
    {"1234", "\\$1,234", true, "dollar sign and separator"},
    // Fractions.
    {"\\frac{1}{2}", "0.5", true, "a fraction and its decimal"},
    {"\\frac{1}{2}", "1/2", true, "a slash fraction"},
    {"\\frac{1}{2}", "\\dfrac{1}{2}", true, "dfrac"},
    {"\\frac{1}{2}", "\\tfrac{1}{2}", true, "tfrac"},
    {"\\frac{1}{2}", "\\frac12", true, "single-digit arguments without braces"},
    {"\\frac{1}{2}", "\\frac 1 2", true, "spaced single-digit arguments"},
    {"\\frac{1}{2}", "\\frac{2}{4}", true, "an unreduced fraction"},
    {"\\frac{1}{2}", "\\frac{2}{1}", false, "numerator and denominator swapped"},
    {"1/2", "2", false, "a fraction is not its denominator"},
    {"1/2", "1", false, "a fraction is not its numerator"},
    {"\\frac{1}{3}", "0.333", false, "a coarse decimal of a third"},
    {"\\frac{1}{3}", "0.3333333", false, "exact rationals compare exactly"},
    {"\\frac{10}{3}", "3.33", false, "a rounded decimal"},
    {"2\\frac{1}{4}", "\\frac{9}{4}", true, "a mixed number"},
    {"2\\frac{1}{4}", "2.25", true, "a mixed number as a decimal"},
    {"2\\frac{1}{4}", "\\frac{1}{2}", false, "a mixed number is not a product"},
    {"-\\frac{1}{2}", "\\frac{-1}{2}", true, "the sign inside the fraction"},
    {"-\\frac{1}{2}", "-0.5", true, "a negative fraction as a decimal"},
    {"-\\frac{1}{2}", "\\frac{1}{2}", false, "the sign matters"},
    {"\\frac{3}{4}", "3/4", true, "slash fraction of a larger value"},
    {"\\frac{x}{2}", "\\frac x2", true, "symbolic fraction, braces normalised"},
    {"\\frac{a}{b}", "a/b", false, "symbolic fractions are not rewritten"},
    {"5", "\\frac{5}{0}", false, "a division by zero is not a number"},
    {"0.1", "\\frac{1}{10}", true, "a tenth"},
    // LaTeX wrappers.
    {"5", "\\left(5\\right)", true, "left and right"},
    {"5", "$5$", true, "math delimiters"},
    {"5", "\\(5\\)", true, "inline math delimiters"},
    {"5", "\\displaystyle 5", true, "displaystyle"},
    {"\\frac{1}{2}", "\\displaystyle\\frac{1}{2}", true, "displaystyle before a fraction"},
    {"5", "\\mathbf{5}", true, "bold"},
    {"5", "\\textbf{5}", true, "text bold"},
    {"5", "{5}", true, "a brace group"},
    {"5", "\\,5\\;", true, "spacing commands"},
    {"5", "\\bigl(5\\bigr)", true, "big delimiters"},
    {"(1,2)", "\\left( 1, 2 \\right)", true, "left and right around a tuple"},
    {"\\frac{1}{2}", "\\left.\\frac{1}{2}\\right.", true, "invisible delimiters"},
    // Units and text.
    {"5", "5\\text{ cm}", true, "a text unit"},
    {"5", "5 \\text{cm}", true, "a spaced text unit"},
    {"5", "5\\mbox{ apples}", true, "an mbox unit"},
    {"5", "5\\,\\mathrm{m}", true, "a roman one-letter unit"},
    {"25", "25\\text{ cm}^2", true, "a unit with a power"},
    {"25", "25 \\text{ m/s}", true, "a compound unit"},
    {"5", "5 cm", true, "a unit word"},
    {"18", "18 dollars", true, "a currency word"},
    {"18.90", "\\$18.90", true, "a dollar sign"},
    {"18.9", "\\$18.90", true, "a dollar sign and a trailing zero"},
    {"5", "5\\text{ or }6", false, "text between numbers is not a unit"},
    {"56", "5\\text{ or }6", false, "joined text is not a number"},
    {"2\\pi", "2 pi", false, "the word pi is not a unit and not \\pi"},
    {"5000000", "5 million", false, "a scale word is not a unit"},
    {"\\text{Monday}", "Monday", true, "unwrapped text"},
    {"\\text{Monday}", "\\text{Tuesday}", false, "different words"},
    {"\\text{(B)}", "(B)", true, "a choice in text"},
    {"\\text{(B)}", "(C)", false, "a different choice"},
    {"\\text{(B)}", "B", true, "a choice letter in parentheses is the letter"},
    {"(C)", "\\textbf{(C)}", true, "a bold choice"},
    {"\\text{(B)}", "(b)", false, "a lower-case letter is not a choice"},
    {"A", "a", false, "case matters"},
    // Percentages.
    {"50", "50\\%", true, "an escaped percent sign is dropped"},
    {"50", "50%", true, "a percent sign is dropped"},
    {"50\\%", "50", true, "a reference percentage"},
    {"50\\%", "50 percent", true, "the word percent"},
    {"50\\%", "0.5", false, "a percent sign is dropped, not divided by 100"},
    {"12.5\\%", "12.5", true, "a decimal percentage"},
    {"50\\%", "5\\%", false, "a different percentage"},
    // Degrees.
    {"30", "30^\\circ", true, "degrees"},
    {"30", "30^{\\circ}", true, "braced degrees"},
    {"30", "30\xC2\xB0", true, "the Unicode degree sign"},
    {"30^\\circ", "30 degrees", true, "the word degrees"},
    {"30", "\\theta = 30^\\circ", true, "an angle assignment"},
    {"30^\\circ", "60^\\circ", false, "a different angle"},
    {"30", "3^\\circ", false, "not the same digits"},
    // Negative numbers.
    {"-5", "-5", true, "identical negatives"},
    {"-5",
     "\xE2\x88\x92"
     "5",
     true, "the Unicode minus sign"},
    {"-5", "- 5", true, "a spaced minus"},
    {"-5", "(-5)", true, "a parenthesised negative"},
    {"-5", "5", false, "the sign matters"},
    {"5", "-5", false, "the sign matters either way"},
    {"5", "--5", true, "a double negation"},
    {"-3", "-3.0", true, "a negative decimal"},
    {"-2", "\\left(-2\\right)", true, "a negative in left/right"},
    // Radicals.
    {"2\\sqrt{3}", "2\\sqrt3", true, "sqrt without braces"},
    {"2\\sqrt{3}", "2 \\sqrt 3", true, "spaced sqrt"},
    {"2\\sqrt{3}", "\\sqrt{12}", true, "the same value"},
    {"\\sqrt{3}", "\\sqrt 3", true, "sqrt with a space"},
    {"\\sqrt{3}", "3", false, "a root is not its radicand"},
    {"\\sqrt{3}", "\\sqrt{2}", false, "different radicands"},
    {"2\\sqrt{3}", "3\\sqrt{2}", false, "coefficient and radicand swapped"},
    {"4\\sqrt{2}", "4\\sqrt{3}", false, "a different radicand"},
    {"\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", true, "a radical over two"},
    {"\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", true, "a rationalised denominator"},
    {"\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", true, "a slash with a radical"},
    {"\\sqrt{2}", "1.4142135624", true, "a decimal with enough digits for the tolerance"},
    {"\\sqrt{2}", "1.41421356", false, "8 decimals claim less precision than the tolerance"},
    {"\\sqrt{2}", "1.414", false, "a decimal outside the tolerance"},
    {"3", "\\sqrt{9}", true, "a perfect square"},
    {"2", "\\sqrt[3]{8}", true, "a cube root"},
    {"3\\sqrt{2}", "\\sqrt{18}", true, "a simplified radical"},
    {"\\sqrt{2}+1", "1+\\sqrt{2}", true, "a sum in either order"},
    {"\\sqrt{3}",
     "\xE2\x88\x9A"
     "3",
     true, "the Unicode root sign"},
    // Pi and powers.
    {"2\\pi", "2\xCF\x80", true, "the Unicode pi"},
    {"\\frac{\\pi}{3}", "\\pi/3", true, "pi over three"},
    {"\\frac{\\pi}{3}", "\\frac{1}{3}\\pi", true, "a third of pi"},
    {"\\pi", "3.14", false, "a rounded pi"},
    {"2\\pi", "\\pi", false, "a multiple of pi"},
    {"1024", "2^{10}", true, "a braced power"},
    {"1024", "2^10", true, "a plain-text power"},
    {"\\frac{1}{4}", "2^{-2}", true, "a negative power"},
    {"9", "3^2", true, "a square"},
    {"9", "2^3", false, "base and exponent swapped"},
    {"100", "10^2", true, "a power of ten"},
    // Tuples and intervals.
    {"(1,2)", "(1, 2)", true, "a spaced tuple"},
    {"(1,2)", "(2,1)", false, "the order of a tuple matters"},
    {"(1,2)", "[1,2]", false, "open and closed intervals differ"},
    {"[1,2]", "(1,2)", false, "closed and open intervals differ"},
    {"(1,2]", "(1, 2]", true, "a half-open interval"},
    {"(1,2]", "(1,2)", false, "the closing bracket matters"},
    {"(1,2]", "[1,2]", false, "the opening bracket matters"},
    {"(-\\infty,3)", "(-\\infty, 3)", true, "an interval to minus infinity"},
    {"(-\\infty,3)", "(-\\infty, 3]", false, "an unbounded interval's closing bracket"},
    {"(-\\infty,3)", "(-\xE2\x88\x9E,3)", true, "the Unicode infinity"},
    {"(-\\infty,3)", "(\\infty,3)", false, "the sign of infinity"},
    {"[0,\\infty)", "[0, \\infty)", true, "an interval to infinity"},
    {"(-\\infty,\\infty)", "(-\\infty, \\infty)", true, "the whole line"},
    {"(\\frac{1}{2},3)", "(0.5,3)", true, "elements compare as numbers"},
    {"(2\\sqrt{3},1)", "(\\sqrt{12}, 1)", true, "radicals in a tuple"},
    {"(1,2,3)", "(1,2)", false, "tuple lengths differ"},
    {"(1,2)", "1,2", false, "a tuple is not a bare list"},
    {"(1,2)", "\\{1,2\\}", false, "a tuple is not a set"},
    {"(3,-4)",
     "(3, \xE2\x88\x92"
     "4)",
     true, "a Unicode minus in a tuple"},
    {"[1,2]", "x \\in [1,2]", true, "an interval membership"},
    {"((1,2),(3,4))", "((1, 2), (3, 4))", true, "nested tuples compare as text"},
    // Sets.
    {"\\{1,2\\}", "\\{2,1\\}", true, "a set in another order"},
    {"\\{1,2\\}", "\\{1,2,3\\}", false, "a larger set"},
    {"\\{1,2\\}", "\\{1,3\\}", false, "a different element"},
    {"\\{1,2\\}", "\\left\\{1,2\\right\\}", true, "left and right braces"},
    {"\\{1,2\\}", "\\lbrace 1, 2\\rbrace", true, "lbrace and rbrace"},
    {"\\{\\frac{1}{2},1\\}", "\\{1,0.5\\}", true, "set elements compare as numbers"},
    {"\\{1,2\\}", "\\{1,1\\}", false, "a repeated element does not cover the set"},
    {"\\emptyset", "\\varnothing", true, "the empty set"},
    {"\\emptyset", "\\{\\}", true, "empty braces"},
    {"\\emptyset", "0", false, "the empty set is not zero"},
    // Bare lists.
    {"1,2", "2,1", true, "roots in any order"},
    {"-2, 3", "3, -2", true, "negative roots in any order"},
    {"1,2", "1,2,3", false, "an extra root"},
    {"1, 2", "1", false, "a missing root"},
    // Assignments and symbolic text.
    {"5", "x=5", true, "an assignment"},
    {"5", "x = 5", true, "a spaced assignment"},
    {"5", "k=5", true, "another variable"},
    {"5", "x=6", false, "a wrong assignment"},
    {"5", "2x=10", false, "an equation is not solved"},
    {"x+1", "x + 1", true, "spaces in an expression"},
    {"x+1", "1+x", false, "symbolic expressions compare as normalised text"},
    {"x^2", "x^{2}", true, "a braced single-character exponent"},
    {"\\sqrt{x}", "\\sqrt x", true, "a symbolic root"},
    {"y=2x+3", "y = 2x + 3", true, "a line equation"},
    {"2x+3", "2x+4", false, "a different expression"},
    {"\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", true,
     "matrix spacing"},
    {"\\begin{pmatrix}12\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", false,
     "matrix rows stay apart"},
    {"x 12", "x 1 2", false, "spaces between digits are kept in text"},
    // Review fixes: each row below, up to the guards, failed before them.
    // Trailing words: at most one unit phrase is dropped, never a word that carries meaning.
    {"5", "5 or more", false, "a hedge after the value is not a unit"},
    {"5", "5 or fewer", false, "a bound after the value is not a unit"},
    {"5", "5 at most", false, "at most is not a unit"},
    {"5", "5 is wrong", false, "a negation is not a unit"},
    {"5", "5 \\text{ is not the answer}", false, "a sentence in text is not a unit"},
    {"5", "5\\text{ or more}", false, "a hedge in text is not a unit"},
    {"5", "5 \\quad \\text{or more}", false, "a spaced hedge in text is not a unit"},
    {"3", "3 or four", false, "an alternative after the value is not a unit"},
    {"2", "2 fifths", false, "a fraction word makes 2/5, not a unit"},
    {"3", "3 quarters", false, "quarters make 3/4"},
    {"7", "7 twelfths", false, "twelfths make 7/12"},
    {"5", "5 minus one", false, "arithmetic in words is not a unit"},
    {"x^2", "x^2 plus one", false, "plus one is not a unit"},
    {"\\sqrt{2}", "\\sqrt{2} over two", false, "over two is not a unit"},
    {"90", "90 km/h", true, "a unit with a slash"},
    {"25", "25 cm^2", true, "a unit word with a power"},
    // Irrationals: a fraction or an integer never equals one; a decimal needs enough digits.
    {"\\pi", "\\frac{355}{113}", false, "a fraction close to pi is not pi"},
    {"\\sqrt{2}", "\\frac{1393}{985}", false, "a convergent of sqrt 2 is not sqrt 2"},
    {"\\sqrt{3}", "\\frac{1351}{780}", false, "a convergent of sqrt 3 is not sqrt 3"},
    {"\\frac{\\sqrt2}{2}", "\\frac{985}{1393}", false, "a fraction close to sqrt(2)/2"},
    {"\\sqrt{501265}", "708", false, "an integer never equals an irrational"},
    {"\\sqrt{1000001}", "\\sqrt{1000002}", false, "irrationals 5e-7 apart differ"},
    {"\\pi", "3.14159", false, "6 digits of pi claim less than the tolerance"},
    {"\\sqrt2", "1.414214", false, "7 digits of sqrt 2 claim less than the tolerance"},
    // Overflowed exact arithmetic is text, never a double within a tolerance.
    {"2^{200}", "2^{200}+1", false, "an overflowed power plus one"},
    {"10^{40}", "10^{40}+10^{33}", false, "overflowed powers of ten"},
    {"1", "1+10^{-40}", false, "a tiny overflowed term"},
    {"0", "10^{-40}", false, "a tiny overflowed power is not zero"},
    {"0", "0.00000000000000000000000000000000000000001", false,
     "a literal too small to be exact is not zero"},
    // Thin spaces join digits only inside a thousands pattern.
    {"12", "1\\,2", false, "a thin space between single digits"},
    {"12",
     "1\xE2\x80\x89"
     "2",
     false, "a Unicode thin space between single digits"},
    {"34",
     "3\xE2\x80\xAF"
     "4",
     false, "a narrow no-break space between single digits"},
    {"12", "(1\\,2)", false, "a thin space in parentheses"},
    {"12345", "1\\,2345", false, "a group of four is not a thousands group"},
    // Sets and the empty set.
    {"\\emptyset", "\\{ \\}", true, "spaced empty braces"},
    {"\\{1\\}", "\\{1,1\\}", true, "duplicates in a set collapse"},
    {"\\{1,2\\}", "\\{2,1,1\\}", true, "a duplicate in a set of two"},
    // Guards for the review fixes: legitimate forms the stricter rules must keep accepting.
    {"10", "10 square feet", true, "a square unit is one unit"},
    {"60", "60 miles per hour", true, "a rate is one unit"},
    {"18", "18.00 dollars", true, "a decimal and a currency word"},
    {"12", "12\\text{ square feet}", true, "a square unit in text"},
    {"\\pi", "3.14159265359", true, "pi to 12 digits"},
    {"-\\sqrt{2}", "-1.4142135624", true, "a negated decimal keeps its precision"},
    {"2", "4^{1/2}", true, "a rational power of a perfect square is exact"},
    {"4", "8^{2/3}", true, "a rational power of a perfect cube is exact"},
    {"100000000000000003", "\\sqrt{10000000000000000600000000000000009}", true,
     "a perfect square past double precision is found exactly"},
    {"2^{200}", "2^{200}", true, "the same overflowed text"},
    {"1000000", "1\\,000\\,000", true, "thin spaces between groups of three"},
    {"1000000",
     "1\xE2\x80\x89"
     "000\xE2\x80\x89"
     "000",
     true, "Unicode thin spaces between groups of three"},
};
const size_t kNumEquivalenceCases = sizeof(kEquivalenceCases) / sizeof(kEquivalenceCases[0]);

TEST(MathEquivalenceTest, TableOfAnswerPairs) {
  size_t equal = 0;
  for (const EquivalenceCase& c : kEquivalenceCases) {
    equal += c.equal;
    EXPECT_EQ(math_answers_equal(c.reference, c.answer, kTolerance), c.equal)
        << c.reason << ": '" << c.reference << "' (" << normalize_math_answer(c.reference)
        << ") vs '" << c.answer << "' (" << normalize_math_answer(c.answer) << ")";
    EXPECT_EQ(math_answers_equal(c.answer, c.reference, kTolerance), c.equal)
        << "not symmetric: " << c.reason;
  }
  EXPECT_GE(kNumEquivalenceCases, 150u);
  EXPECT_GE(equal, 60u);
  EXPECT_GE(kNumEquivalenceCases - equal, 60u);
}

TEST(MathEquivalenceTest, TableRowsScoreTheSameThroughTheReward) {
  const MathReward reward{MathRewardOptions{}};
  for (const EquivalenceCase& c : kEquivalenceCases) {
    core::Json record = core::Json::object();
    record.set("answer", c.reference);
    const std::string completion =
        std::string(
            "Let me think step by step. 3 + 4 = 7, and {so} on.\n\nThe result is $\\boxed{") +
        c.answer + "}$.";
    RewardInput input;
    input.record = &record;
    input.record_name = "row";
    input.completion = completion;
    absl::StatusOr<RewardOutput> out = reward.score(input);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->score, c.equal ? 1.0 : 0.0) << c.reason << ": " << completion;
    EXPECT_EQ(out->components.at("format"), 1.0) << c.reason;
  }
}

TEST(MathNormalizeTest, WritesCanonicalForms) {
  EXPECT_EQ(normalize_math_answer("\\dfrac{2}{4}"), "1/2");
  EXPECT_EQ(normalize_math_answer("1,234,567"), "1234567");
  EXPECT_EQ(normalize_math_answer("\\left( 1, \\frac12 \\right]"), "(1,1/2]");
  EXPECT_EQ(normalize_math_answer("\\{3, 1\\}"), "{1,3}");
  EXPECT_EQ(normalize_math_answer("x = 5\\text{ cm}"), "5");
  EXPECT_EQ(normalize_math_answer("\\text{Monday}"), "Monday");
  EXPECT_EQ(normalize_math_answer("\\frac x2 + \\sqrt 3 y"), "\\frac{x}{2}+\\sqrt{3}y");
  EXPECT_EQ(normalize_math_answer("\\pi r^{2}"), "\\pi r^2");
  EXPECT_EQ(normalize_math_answer("(-\\infty, 0)"), "(-inf,0)");
}

TEST(MathNormalizeTest, BoundsLongAndDeepInputs) {
  // 10^5 nested braces: past the expression depth limit, compared as text, no recursion.
  const std::string deep = std::string(100000, '{') + "1" + std::string(100000, '}');
  EXPECT_FALSE(math_answers_equal("1", deep, kTolerance));
  const std::string shallow = std::string(400, '{') + "1" + std::string(400, '}');
  EXPECT_FALSE(math_answers_equal("1", shallow, kTolerance));
  EXPECT_TRUE(math_answers_equal("1", "{{{1}}}", kTolerance));
  // 10^4 digits: not a number, and not equal to a rounded one.
  const std::string digits(10000, '9');
  EXPECT_FALSE(math_answers_equal("1e10000", digits, kTolerance));
  EXPECT_TRUE(math_answers_equal(digits, digits, kTolerance));
  EXPECT_FALSE(math_answers_equal(digits, digits + "9", kTolerance));
  // Many elements: text, not a 10^4-way matching.
  std::string list = "1";
  for (int i = 2; i < 5000; ++i) list += "," + std::to_string(i);
  EXPECT_FALSE(math_answers_equal("1", list, kTolerance));
  std::string set = "\\{1";
  for (int i = 2; i <= 64; ++i) set += "," + std::to_string(i);
  EXPECT_TRUE(math_answers_equal(set + "\\}", set + "\\}", kTolerance));
  EXPECT_FALSE(math_answers_equal(set + "\\}", set + ",65\\}", kTolerance));
}

TEST(MathNormalizeTest, AcceptsAnyBytes) {
  const char kBytes[] = "\xFF\xFE\0\x80\\\0{\xC3\x28}\\frac{\0}{1}";
  const std::string bytes(kBytes, sizeof(kBytes) - 1);
  EXPECT_FALSE(math_answers_equal("1", bytes, kTolerance));
  EXPECT_TRUE(math_answers_equal(bytes, bytes, kTolerance));
  // A NUL does not end the answer: "1\0 23" is not 1.
  EXPECT_FALSE(math_answers_equal("1", std::string("1\0 23", 5), kTolerance));
  EXPECT_FALSE(math_answers_equal("1", std::string("1\0", 2), kTolerance));
}

}  // namespace
}  // namespace flywheel::rewards::math
