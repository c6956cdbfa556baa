#include "math/answer_extraction.h"

#include <string>

#include "gtest/gtest.h"

namespace flywheel::rewards::math {
namespace {

struct ExtractionCase {
  const char* text;
  bool fallback_to_last_number;
  AnswerSource source;
  const char* answer;
  const char* reason;
};

const ExtractionCase kExtractionCases[] = {
    {"so x = \\boxed{42}.", false, AnswerSource::kBoxed, "42", "plain boxed"},
    {"first \\boxed{1} then \\boxed{2}", false, AnswerSource::kBoxed, "2", "the last box wins"},
    {"\\boxed{\\frac{1}{2}}", false, AnswerSource::kBoxed, "\\frac{1}{2}", "nested braces"},
    {"\\boxed{\\{1, \\{2\\}\\}}", false, AnswerSource::kBoxed, "\\{1, \\{2\\}\\}",
     "escaped braces do not close the box"},
    {"\\fbox{7}", false, AnswerSource::kBoxed, "7", "fbox"},
    {"\\boxed{3} and \\fbox{4}", false, AnswerSource::kBoxed, "4", "fbox after boxed wins"},
    {"\\boxed {5}", false, AnswerSource::kBoxed, "5", "space before the brace"},
    {"$\\boxed 9$", false, AnswerSource::kBoxed, "9", "one-token box without braces"},
    {"\\boxed{\\boxed{8}}", false, AnswerSource::kBoxed, "8",
     "a box holding only a box is unwrapped"},
    {"\\boxed{ \\fbox{3} }", false, AnswerSource::kBoxed, "3", "an fbox in a box, spaced"},
    {"\\boxed{\\boxed{1} + 2}", false, AnswerSource::kBoxed, "\\boxed{1} + 2",
     "a box holding more than a box is kept whole"},
    {"\\boxed5", false, AnswerSource::kBoxed, "5", "a box of the next token, no brace or space"},
    {"\\boxed{6} then \\boxed{7", false, AnswerSource::kBoxed, "6",
     "an unclosed (truncated) box is skipped"},
    {"\\boxed{1} #### 2", false, AnswerSource::kHashes, "2",
     "a #### after the box is stated later"},
    {"#### 2\n\\boxed{1}", false, AnswerSource::kBoxed, "1", "a box after #### is stated later"},
    {"I think \\boxed{42}. Hmm, actually\n#### 7", false, AnswerSource::kHashes, "7",
     "a later #### beats an earlier box"},
    {"\\boxed{3}\nno, the answer is 4.", false, AnswerSource::kAnswerIs, "4",
     "a later answer phrase beats an earlier box"},
    {"The answer is \\boxed{5}.", false, AnswerSource::kBoxed, "5",
     "a box inside the answer sentence is the answer"},
    {"\\boxed{5}. I hope this answer is correct.", false, AnswerSource::kBoxed, "5",
     "a comment on the answer is not an answer"},
    {"The answer is 5. I hope this answer is right.", false, AnswerSource::kAnswerIs, "5",
     "the phrase before a comment"},
    {"#### The answer is 7", false, AnswerSource::kAnswerIs, "7",
     "of two markers ending together, the inner one"},
    {"<think>maybe \\boxed{42}? no wait.</think> The answer is 7.", false, AnswerSource::kAnswerIs,
     "7", "text before </think> is ignored"},
    {"<think>\\boxed{1}</think>", true, AnswerSource::kNone, "",
     "nothing after </think> is no answer"},
    {"<think>a</think> 1 <think>b</think> \\boxed{2}", false, AnswerSource::kBoxed, "2",
     "after the last </think>"},
    {"\\boxedx{1}", false, AnswerSource::kNone, "", "another command is not a box"},
    {"}} stray \\boxed{5}", false, AnswerSource::kBoxed, "5", "stray closing braces before"},
    {"work\n#### 42", false, AnswerSource::kHashes, "42", "GSM8K answer line"},
    {"#### 1\n#### 1,234\nthanks", false, AnswerSource::kHashes, "1,234",
     "the last ####, up to the end of its line"},
    {"####   ", true, AnswerSource::kNone, "", "an empty #### line is no answer"},
    {"The answer is 42.", false, AnswerSource::kAnswerIs, "42", "answer is, period dropped"},
    {"the answer is: 3.5. I hope", false, AnswerSource::kAnswerIs, "3.5",
     "a decimal point is not the end of the sentence"},
    {"The final answer is $\\frac{1}{2}$. I hope it is correct.", false, AnswerSource::kAnswerIs,
     "$\\frac{1}{2}$", "Minerva format"},
    {"The ANSWER IS 7\nmore text", false, AnswerSource::kAnswerIs, "7", "case-insensitive"},
    {"The answer is $18. I hope this helps!", false, AnswerSource::kAnswerIs, "$18",
     "a $ before a digit never closed on its line is currency"},
    {"The answer is $18.50. Thanks", false, AnswerSource::kAnswerIs, "$18.50",
     "currency with cents"},
    {"The answer is \\$18. Thanks", false, AnswerSource::kAnswerIs, "\\$18", "an escaped dollar"},
    {"The answer is $18$. Thanks", false, AnswerSource::kAnswerIs, "$18$",
     "a closed $ is math, as before"},
    {"the answer is 1. no, the answer is 2.", false, AnswerSource::kAnswerIs, "2",
     "the last phrase wins"},
    {"the answeris 3", false, AnswerSource::kNone, "", "the phrase must be whole"},
    {"I get 3 apples and 5 pears", false, AnswerSource::kNone, "", "no fallback by default"},
    {"I get 3 apples and 5 pears", true, AnswerSource::kLastNumber, "5", "fallback: last number"},
    {"total: -1,234.5 dollars", true, AnswerSource::kLastNumber, "-1,234.5",
     "fallback keeps sign, separators and decimals"},
    {"ratio 3/4.", true, AnswerSource::kLastNumber, "3/4", "fallback keeps a slash fraction"},
    {"no digits here", true, AnswerSource::kNone, "", "fallback finds nothing"},
    {"\\boxed{2} later 3", true, AnswerSource::kBoxed, "2", "a box beats the fallback"},
    {"", true, AnswerSource::kNone, "", "empty text"},
};

TEST(AnswerExtractionTest, FindsTheFinalAnswerInEveryFormat) {
  for (const ExtractionCase& c : kExtractionCases) {
    const ExtractedAnswer got = extract_answer(c.text, c.fallback_to_last_number);
    EXPECT_EQ(got.source, c.source)
        << c.reason << ": " << c.text << " -> " << answer_source_name(got.source);
    EXPECT_EQ(got.text, c.answer) << c.reason << ": " << c.text;
    EXPECT_EQ(got.found(), c.source != AnswerSource::kNone) << c.reason;
  }
}

TEST(AnswerExtractionTest, HandlesDeepNestingInLinearTime) {
  const std::string open(100000, '{');
  const std::string close(100000, '}');
  // Balanced: the box holds the whole nest.
  const std::string balanced = "\\boxed{" + open + "1" + close + "}";
  ExtractedAnswer got = extract_answer(balanced, false);
  ASSERT_EQ(got.source, AnswerSource::kBoxed);
  EXPECT_EQ(got.text.size(), 200001u);
  // Never closed: no box; a nested run of 10^5 boxes never closed either.
  EXPECT_FALSE(extract_answer("\\boxed{" + open, false).found());
  std::string boxes;
  for (int i = 0; i < 100000; ++i) boxes += "\\boxed{";
  EXPECT_FALSE(extract_answer(boxes, false).found());
  // 10^5 nested boxes that do close: the outermost wins.
  const std::string closed = boxes + "5" + close;
  got = extract_answer(closed, false);
  ASSERT_EQ(got.source, AnswerSource::kBoxed);
  EXPECT_EQ(got.text.substr(0, 7), "\\boxed{");
}

TEST(AnswerExtractionTest, AcceptsAnyBytes) {
  const char kText[] = "\xFF\xFE\0\0 ####\0 x\n \\boxed{\0\xC3(}";
  const std::string text(kText, sizeof(kText) - 1);
  const ExtractedAnswer got = extract_answer(text, true);
  EXPECT_EQ(got.source, AnswerSource::kBoxed);
  EXPECT_EQ(got.text, absl::string_view("\0\xC3(", 3));
}

TEST(AnswerExtractionTest, StaysLinearOnManyMarkers) {
  // 10^5 comments after a box, 10^5 "</think>" and unclosed currency: one scan each.
  std::string comments = "\\boxed{5}";
  for (int i = 0; i < 100000; ++i) comments += " this answer is correct.";
  ExtractedAnswer got = extract_answer(comments, false);
  EXPECT_EQ(got.source, AnswerSource::kBoxed);
  EXPECT_EQ(got.text, "5");
  std::string thinks;
  for (int i = 0; i < 100000; ++i) thinks += "</think>";
  EXPECT_FALSE(extract_answer(thinks, false).found());
  std::string dollars = "the answer is ";
  for (int i = 0; i < 100000; ++i) dollars += "$1 ";
  got = extract_answer(dollars, false);
  EXPECT_EQ(got.source, AnswerSource::kAnswerIs);
  EXPECT_EQ(got.text.size(), 300000u - 1);
}

}  // namespace
}  // namespace flywheel::rewards::math
