#include "tokenizer/pretokenizer_regex.h"

#include <string>
#include <vector>

#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

using ::testing::HasSubstr;

// The Split patterns of the Qwen2/Qwen3 and Llama 3 tokenizer.json files, and GPT-2's.
constexpr const char* kQwen3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string repeat(const std::string& unit, size_t bytes) {
  std::string text;
  text.reserve(bytes + unit.size());
  while (text.size() < bytes) text += unit;
  return text;
}

// A byte-level BPE tokenizer.json (vocab: a few bytes, no merges) whose Split regex is `pattern`.
std::string tokenizer_with_split(const std::string& pattern) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "1": 3}, "merges": []},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": )" +
         core::Json(pattern).dump() + R"(}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"}})";
}

// PCRE2 used to re-validate the UTF-8 of the rest of the text on every match: 256 KB took 15 s,
// so these 4 MB would take hours. Once linear they take well under a second.
TEST(PretokenizerRegexTest, LongTextsAreMatchedInLinearTime) {
  auto regex = PretokenizerRegex::compile(kQwen3Pattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  const std::string text = repeat("Hello, world! 12 \xE4\xBD\xA0\xE5\xA5\xBD\n\t  ", 4 << 20);
  auto matches = (*regex)->find_all(text);
  ASSERT_TRUE(matches.ok()) << matches.status();
  EXPECT_EQ(matches->back().second, text.size());

  auto tokenizer = load_hf_tokenizer_json(tokenizer_with_split(kQwen3Pattern), "t.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->encode(repeat("ab 1", 4 << 20));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), size_t{4} << 20);  // a, b, Ġ, 1 (no merges)
}

// A lookahead that scans to the end of the text at every match: quadratic, and not bounded by
// PCRE2's match limit (which counts backtracking per start position). It used to run for
// minutes on 200 KB; now it stops on its work budget.
TEST(PretokenizerRegexTest, QuadraticLookaheadFailsOnItsWorkBudget) {
  auto regex = PretokenizerRegex::compile("a(?=a*b)|a");
  ASSERT_TRUE(regex.ok()) << regex.status();
  auto matches = (*regex)->find_all(std::string(64 << 10, 'a'));
  ASSERT_FALSE(matches.ok());
  EXPECT_EQ(matches.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(matches.status().message()),
              HasSubstr("pre-tokenizer regex 'a(?=a*b)|a' exceeded its work budget"));

  auto tokenizer = load_hf_tokenizer_json(tokenizer_with_split("a(?=a*b)|a"), "t.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->encode(std::string(64 << 10, 'a'));
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("work budget"));
}

// The budget is calibrated on the patterns of released tokenizers: on their worst legitimate
// texts (long runs of one character class, alternations that match one byte at a time, CJK,
// emoji, combining marks, Unicode spaces) they use at most a tenth of it.
TEST(PretokenizerRegexTest, RealPatternsStayFarInsideTheBudgetOnTheirWorstTexts) {
  const std::vector<std::string> units = {
      " ",
      "\t",
      "\n",
      "\r\n",
      "  \n",
      " \n ",
      "\n ",
      "7",
      " 7",
      "12 ",
      "a",
      " a",
      "a ",
      "   a",
      "!",
      " !",
      "!\n",
      "'s",
      "'S ",
      "' ",
      " '",
      "\xE4\xBD\xA0",                                  // CJK
      "\xF0\x9F\x98\x80",                              // emoji
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",  // emoji ZWJ sequence
      "e\xCC\x81",                                     // combining accent
      "\xC2\xA0",
      "\xE3\x80\x80",
      "\xE1\xA0\x8E",
      "\xC2\x85",  // NBSP, U+3000, U+180E, NEL
      "Hello, world! It's 2024: 1,234 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80\n\t  "};
  for (const char* pattern : {kQwen3Pattern, kLlama3Pattern, kGpt2Pattern}) {
    auto regex = PretokenizerRegex::compile(pattern);
    ASSERT_TRUE(regex.ok()) << regex.status();
    for (const std::string& unit : units) {
      for (const std::string& text : {unit, repeat(unit, 256 << 10), repeat(unit, 256 << 10) + "x",
                                      std::string(256 << 10, ' ') + unit}) {
        PretokenizerRegex::Stats stats;
        auto matches = (*regex)->find_all(text, &stats);
        ASSERT_TRUE(matches.ok()) << pattern << " on '" << unit << "': " << matches.status();
        EXPECT_LE(stats.work * 10, stats.budget) << pattern << " on '" << unit << "'";
        EXPECT_LE(stats.calls, static_cast<int64_t>(text.size()) + 1);
      }
    }
  }
}

// Patterns whose work grows quadratically (or worse) in the text, with or without lookahead,
// and whose work is not counted by PCRE2's match limit: each stops once it has done about its
// budget's worth of work.
TEST(PretokenizerRegexTest, QuadraticPatternsStopAfterTheirBudget) {
  const std::string text(200 << 10, 'a');
  for (const char* pattern : {"a(?=a*b)|a", "\\p{L}(?=\\p{L}*\\d)|\\s", "a[^x]*y|a",
                              "(?:a(?=[^x]*$))+$|.", "(?:a(?=a*$))+$|."}) {
    auto regex = PretokenizerRegex::compile(pattern);
    ASSERT_TRUE(regex.ok()) << regex.status();
    PretokenizerRegex::Stats stats;
    auto matches = (*regex)->find_all(text, &stats);
    ASSERT_FALSE(matches.ok()) << pattern;
    EXPECT_EQ(matches.status().code(), absl::StatusCode::kResourceExhausted) << pattern;
    EXPECT_THAT(std::string(matches.status().message()), HasSubstr("exceeded its work budget"));
    // The last step may overshoot by the distance the match position jumped.
    EXPECT_LE(stats.work, stats.budget + static_cast<int64_t>(text.size()) + 1) << pattern;
  }
}

TEST(PretokenizerRegexTest, InvalidUtf8IsAnError) {
  auto regex = PretokenizerRegex::compile(kQwen3Pattern);
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ((*regex)->find_all("ab\xFF").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flywheel::model
