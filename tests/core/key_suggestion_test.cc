#include "key_suggestion.h"

#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

TEST(EditDistanceTest, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("lr", "lr"), 0u);
  EXPECT_EQ(edit_distance("lrr", "lr"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("modle", "model"), 1u);  // adjacent transposition
  EXPECT_EQ(edit_distance("jsnol", "jsonl"), 1u);
}

TEST(SuggestKeyTest, PrefersSiblingsThenAnyPathWithACloseLastComponent) {
  std::vector<std::string> siblings = {"trainer.lr", "trainer.seed"};
  std::vector<std::string> all = {"trainer.lr", "trainer.seed", "data.seed"};
  EXPECT_EQ(suggest_key("trainer.sed", siblings, all), "trainer.seed");
  EXPECT_EQ(suggest_key("lr", {}, all), "trainer.lr");
  EXPECT_EQ(suggest_key("trainer.zzzzzz", siblings, all), std::nullopt);
}

}  // namespace
}  // namespace flywheel::core
