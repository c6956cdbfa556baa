// Python literals and assertion plans of code_exec (python_value.h, python_tests.h): what is
// compared outside the solution's process, and which test forms are refused.
#include "sandbox/python_tests.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/python_value.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

std::string canonical(absl::string_view literal) {
  absl::StatusOr<PyValue> v = parse_python_literal(literal);
  EXPECT_TRUE(v.ok()) << literal << ": " << v.status();
  return v.ok() ? v->canonical() : "";
}

PyValue from_tokens(absl::string_view text) {
  absl::StatusOr<std::vector<PyValue>> v = python_values_from_text(text, 1);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? (*v)[0] : PyValue{};
}

TEST(PythonLiteralTest, ParsesEveryPlainLiteralAsPythonWould) {
  EXPECT_EQ(canonical("0x1F"), canonical("31"));
  EXPECT_EQ(canonical("0o17"), canonical("15"));
  EXPECT_EQ(canonical("0b1_0001"), canonical("17"));
  EXPECT_EQ(canonical("-5"), "i-5");
  EXPECT_EQ(canonical("- 0"), "i0");
  EXPECT_EQ(canonical("123456789012345678901234567890"), "i123456789012345678901234567890");
  EXPECT_EQ(canonical("1.5"), canonical("15e-1"));
  EXPECT_EQ(canonical("-0.0"), canonical("0.0"));  // equal in Python
  EXPECT_NE(canonical("1"), canonical("1.0"));     // exact types
  EXPECT_NE(canonical("True"), canonical("1"));
  EXPECT_EQ(canonical("'a\\n' \"b\""), canonical("'a\\nb'"));  // adjacent literals join
  EXPECT_EQ(canonical("'\\x41\\u00e9'"), canonical("'A\xc3\xa9'"));
  EXPECT_EQ(canonical("r'a\\n'"), canonical("'a\\\\n'"));
  EXPECT_EQ(canonical("'''x\ny'''"), canonical("'x\\ny'"));
  EXPECT_NE(canonical("b'ab'"), canonical("'ab'"));
  EXPECT_EQ(canonical("[1, (2,), {'a': None}]"), canonical("[1,(2,),{'a':None},]"));
  EXPECT_NE(canonical("[1, 2]"), canonical("(1, 2)"));
  EXPECT_EQ(canonical("{1: 'a', 2: 'b'}"), canonical("{2: 'b', 1: 'a'}"));  // order-free
  EXPECT_EQ(canonical("{3, 1, 1}"), canonical("{1, 3}"));
  EXPECT_EQ(canonical("()"), "()");
  EXPECT_EQ(canonical("(5)"), canonical("5"));  // parentheses, not a tuple
  for (const char* bad : {"f(1)", "x", "1j", "f'x'", "[1, 2", "{1: 2, 3}", "1 + 2", "'a", "--"}) {
    EXPECT_FALSE(parse_python_literal(bad).ok()) << bad;
  }
}

TEST(PythonLiteralTest, HarnessTokensMatchTheirLiterals) {
  EXPECT_EQ(from_tokens("L3 i1 U1 s61 n").canonical(), canonical("[1, ('a',), None]"));
  EXPECT_EQ(from_tokens("f0x1.8000000000000p+0").canonical(), canonical("1.5"));
  EXPECT_EQ(from_tokens("D1 s6b T").canonical(), canonical("{'k': True}"));
  EXPECT_EQ(from_tokens("y6162").canonical(), canonical("b'ab'"));
  EXPECT_EQ(from_tokens("s").canonical(), canonical("''"));
  for (const char* bad : {"?416c77617973", "i1.5", "L3 i1", "x", "D1 s6b", "ffast", "i1 i2", ""}) {
    EXPECT_FALSE(python_values_from_text(bad, 1).ok()) << bad;
  }
  EXPECT_THAT(std::string(python_values_from_text("?416c77617973", 1).status().message()),
              HasSubstr("an object of type Always"));
}

PyCheck only_check(absl::string_view test) {
  absl::StatusOr<std::vector<PyStep>> steps = plan_python_test(test);
  EXPECT_TRUE(steps.ok()) << test << ": " << steps.status();
  if (!steps.ok() || steps->size() != 1 || !(*steps)[0].is_check) return {};
  return (*steps)[0].check;
}

TEST(PythonTestPlanTest, SplitsEachAssertIntoAnExpressionAndAJudgementOutside) {
  PyCheck eq = only_check("assert add(2, 2) == 4, 'two and two'");
  EXPECT_EQ(eq.kind, PyCheck::Kind::kEqual);
  EXPECT_EQ(eq.expression, "add(2, 2)");
  EXPECT_EQ(eq.expected.canonical(), "i4");
  EXPECT_TRUE(check_passes(eq, *parse_python_literal("4")));
  EXPECT_FALSE(check_passes(eq, *parse_python_literal("4.0")));

  PyCheck mirrored = only_check("assert [1, 2] == f(x == 1, 'a, b')");
  EXPECT_EQ(mirrored.expression, "f(x == 1, 'a, b')");
  EXPECT_EQ(mirrored.expected.canonical(), canonical("[1, 2]"));

  PyCheck less = only_check("assert 3 < g()");  // g() > 3
  EXPECT_EQ(less.kind, PyCheck::Kind::kGreater);
  EXPECT_TRUE(check_passes(less, *parse_python_literal("4")));
  EXPECT_FALSE(check_passes(less, *parse_python_literal("3")));

  PyCheck truth = only_check("assert is_prime(7)");
  EXPECT_EQ(truth.kind, PyCheck::Kind::kTrue);
  EXPECT_FALSE(check_passes(truth, *parse_python_literal("1")));  // truthy is not True
  EXPECT_EQ(only_check("assert not is_prime(8)").kind, PyCheck::Kind::kFalse);

  PyCheck approx = only_check("assert abs(area(2) - 12.566) < 1e-3");
  EXPECT_EQ(approx.kind, PyCheck::Kind::kApprox);
  EXPECT_EQ(approx.expression, "area(2)");
  EXPECT_TRUE(check_passes(approx, *parse_python_literal("12.5663")));
  EXPECT_FALSE(check_passes(approx, *parse_python_literal("12.6")));

  PyCheck close = only_check("assert math.isclose(f(1), 0.5, rel_tol=0.01)");
  EXPECT_EQ(close.kind, PyCheck::Kind::kIsClose);
  EXPECT_TRUE(check_passes(close, *parse_python_literal("0.504")));
  EXPECT_FALSE(check_passes(close, *parse_python_literal("0.51")));

  PyCheck shift = only_check("assert f(1 << 3) == 8");  // << is no comparison
  EXPECT_EQ(shift.expression, "f(1 << 3)");
}

TEST(PythonTestPlanTest, SetupRunsBeforeItsChecksAndUnjudgeableFormsAreRefused) {
  absl::StatusOr<std::vector<PyStep>> steps =
      plan_python_test("import math\nx = [3, 1]\nassert sort(x) == [1, 3]\nassert len(x) == 2");
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_FALSE((*steps)[0].is_check);
  EXPECT_FALSE((*steps)[1].is_check);
  EXPECT_TRUE((*steps)[2].is_check);
  EXPECT_TRUE((*steps)[3].is_check);
  for (const char* bad :
       {"assert f(1) == g(2)", "assert f(1) in (1, 2)", "assert f(1) == 1 and f(2) == 2",
        "assert 0 < f(1) < 3", "assert f(1) is None", "assert not f(1) == 2",
        "for i in range(3):\n    assert f(i) == i", "x = 1", "assert f(1) == 1 if y else 2"}) {
    absl::StatusOr<std::vector<PyStep>> plan = plan_python_test(bad);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(plan_python_test("assert f(1) in (1, 2)").status().message()),
              HasSubstr("uses `in` at its top level"));
}

}  // namespace
}  // namespace flywheel::rewards
