#include "flywheel/rewards/param_reader.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

TEST(ParamReaderTest, ReadsTypedValuesWithDefaults) {
  ParamReader r("math", {{"tolerance", "1e-4"}, {"fallback", "yes"}, {"n", "7"}, {"mode", "b"}});
  EXPECT_EQ(r.number("tolerance", 1e-6), 1e-4);
  EXPECT_TRUE(r.boolean("fallback", false));
  EXPECT_EQ(r.integer("n", 1, 0, 10), 7);
  EXPECT_EQ(r.choice("mode", "a", {"a", "b"}), "b");
  EXPECT_EQ(r.string("absent", "default"), "default");
  EXPECT_TRUE(r.finish().ok());
}

TEST(ParamReaderTest, RejectsBadValuesAndUnknownKeysNamingThem) {
  struct Case {
    std::map<std::string, std::string> params;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"tolerance", "abc"}}, "option 'tolerance' is 'abc'; must be a finite number"},
      {{{"tolerance", "nan"}}, "must be a finite number"},
      {{{"flag", "maybe"}}, "option 'flag' is 'maybe'; must be true or false"},
      {{{"n", "11"}}, "option 'n' is 11; must be in [0, 10]"},
      {{{"n", "1.5"}}, "must be an integer"},
      {{{"mode", "c"}}, "must be one of a, b"},
      {{{"tolerence", "1"}}, "did you mean 'tolerance'?"},
      {{{"zzz", "1"}}, "unknown option 'zzz'"},
  };
  for (const Case& c : cases) {
    ParamReader r("math", c.params);
    r.number("tolerance", 0);
    r.boolean("flag", false);
    r.integer("n", 1, 0, 10);
    r.choice("mode", "a", {"a", "b"});
    absl::Status s = r.finish();
    EXPECT_FALSE(s.ok()) << c.error;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
    EXPECT_THAT(std::string(s.message()), HasSubstr("reward 'math'"));
  }
}

}  // namespace
}  // namespace flywheel::rewards
