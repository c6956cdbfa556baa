#include "flywheel/core/json.h"

#include "flywheel/core/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::HasSubstr;

TEST(JsonTest, ParsesEveryKindAndKeepsObjectOrder) {
  absl::StatusOr<Json> j = Json::parse(
      R"( {"b": [1, -2.5e3, true, false, null], "a": {"x": "y"}, "big": 9007199254740993} )");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(j->is_object());
  EXPECT_EQ(j->as_object()[0].first, "b");
  const Json& b = *j->find("b");
  EXPECT_EQ(b.as_array()[0].as_int(), 1);
  EXPECT_DOUBLE_EQ(b.as_array()[1].as_double(), -2500.0);
  EXPECT_FALSE(b.as_array()[1].is_integer());
  EXPECT_TRUE(b.as_array()[2].as_bool());
  EXPECT_TRUE(b.as_array()[4].is_null());
  EXPECT_EQ(j->find("a")->find("x")->as_string(), "y");
  EXPECT_EQ(j->find("big")->as_int(), 9007199254740993);  // exact beyond 2^53
  EXPECT_EQ(j->find("missing"), nullptr);
}

TEST(JsonTest, DecodesEscapesAndSurrogatePairs) {
  absl::StatusOr<Json> j = Json::parse(R"("a\"\\\/\b\f\n\r\t\u00e9\u4f60\ud83d\ude00")");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->as_string(), "a\"\\/\b\f\n\r\t\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80");
  // A lone surrogate becomes U+FFFD rather than invalid UTF-8.
  EXPECT_EQ(Json::parse(R"("\ud800x")")->as_string(), "\xEF\xBF\xBDx");
}

TEST(JsonTest, DumpRoundTrips) {
  std::string text = R"({"s":"tab\t \"q\" \u0001 é","n":[0,-7,0.25,1e-06],"o":{},"a":[],"t":true})";
  absl::StatusOr<Json> j = Json::parse(text);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->dump(),
            R"({"s":"tab\t \"q\" \u0001 é","n":[0,-7,0.25,1e-06],"o":{},"a":[],"t":true})");
  EXPECT_EQ(Json::parse(j->dump())->dump(), j->dump());
}

TEST(JsonTest, WriterReplacesInvalidUtf8) {
  std::string out;
  append_json_string(std::string("a\xFF"
                                 "b\xE4\xBD",
                                 5),
                     &out);
  EXPECT_EQ(out,
            "\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\"");
}

TEST(JsonTest, ErrorsNameLineAndColumn) {
  absl::Status s = Json::parse("{\n  \"a\": [1, 2,,]\n}").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("line 2, column 14: unexpected character ','"));
  EXPECT_FALSE(Json::parse("").ok());
  EXPECT_FALSE(Json::parse("{\"a\":1} x").ok());
  EXPECT_FALSE(Json::parse("\"unterminated").ok());
  EXPECT_FALSE(Json::parse("01").ok());
  EXPECT_FALSE(Json::parse("[1,]").ok());
  EXPECT_FALSE(Json::parse("{\"a\" 1}").ok());
  EXPECT_FALSE(Json::parse("tru").ok());
  EXPECT_FALSE(Json::parse("\"\\x\"").ok());
  EXPECT_FALSE(Json::parse("\"a\nb\"").ok());  // raw control character
}

TEST(JsonTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  absl::Status s = Json::parse(deep).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("nesting deeper than 512"));
}

TEST(Utf8Test, ValidatesAndReplacesLikeRust) {
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9", 0), 2u);
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xC0\x80", 0), 0u);      // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);  // surrogate
  // Maximal subparts: "\xF0\x9F\x98" is one replacement, then "x".
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(is_valid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_FALSE(is_valid_utf8("ok\xC0\x80"));
  EXPECT_FALSE(is_valid_utf8("cut \xF0\x9F\x98"));
}

}  // namespace
}  // namespace flywheel::core
