#include "flywheel/model/tokenizer/step_tokens.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A process reward model's layout: the prompt, then each step with the separator, the label
// read at each step's last token.
TEST(StepTokensTest, StepsFollowThePromptEachEndingWithTheSeparator) {
  // The default character tokenizer (no char_tokenizer.json in the directory).
  auto loaded = load_tokenizer("/nonexistent-flywheel-dir", "char");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::unique_ptr<Tokenizer>& tokenizer = *loaded;
  auto t = encode_steps(*tokenizer, "1+2=", {"a", "bc"}, "\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_tokens, 4);
  EXPECT_THAT(t->step_ends, ElementsAre(6, 9));  // "a\n" then "bc\n"
  auto whole = tokenizer->encode("1+2=a\nbc\n");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(t->ids, *whole);
  // Per-token steps: no separator; a special token written as text is one step.
  auto digits = encode_steps(*tokenizer, "1+2=", {"3", "<eos>"}, "");
  ASSERT_TRUE(digits.ok()) << digits.status();
  EXPECT_THAT(digits->step_ends, ElementsAre(5, 6));
  EXPECT_EQ(digits->ids.back(), 2);  // <eos>
  auto empty = encode_steps(*tokenizer, "1+2=", {"3", ""}, "");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("step 1 is empty"));
}

TEST(StepTokensTest, SplitStepsCutsAtTheSeparatorAndSkipsEmptyPieces) {
  auto steps = split_steps("x=1\n\ny=2\nz", "\n");
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].text, "x=1");
  EXPECT_EQ(steps[0].end, 5u);  // past both newlines: the empty piece ends the step before
  EXPECT_EQ(steps[1].text, "y=2");
  EXPECT_EQ(steps[1].end, 9u);
  EXPECT_EQ(steps[2].text, "z");
  EXPECT_EQ(steps[2].end, 10u);
  EXPECT_TRUE(split_steps("", "\n").empty());
  EXPECT_EQ(split_steps("\nab", "\n").size(), 1u);  // a leading separator is no step
  EXPECT_EQ(split_steps("abc", "").size(), 1u);     // no separator: one step
}

}  // namespace
}  // namespace flywheel::model
