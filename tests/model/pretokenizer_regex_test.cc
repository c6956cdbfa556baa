#include "pretokenizer_regex.h"

#include <string>

#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer.h"
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

}  // namespace
}  // namespace flywheel::model
