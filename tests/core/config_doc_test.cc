#include <fstream>
#include <sstream>

#include "flywheel/core/config_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::HasSubstr;

TEST(ConfigDocTest, DocsConfigMdMatchesTheSchema) {
  std::ifstream in(FLYWHEEL_SOURCE_DIR "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream committed;
  committed << in.rdbuf();
  EXPECT_EQ(committed.str(), config_reference_markdown())
      << "docs/config.md is out of date; regenerate it with "
         "`build/flywheel config-doc --output docs/config.md`";
}

TEST(ConfigDocTest, EveryKeyIsDocumented) {
  std::string doc = config_reference_markdown();
  for (const std::string& path : all_config_key_paths()) {
    EXPECT_THAT(doc, HasSubstr("`" + path + "`")) << path;
  }
}

TEST(ConfigDocTest, RowsShowTypeDefaultAndConstraints) {
  std::string doc = config_reference_markdown();
  EXPECT_THAT(doc, HasSubstr("| `trainer.lr` | float | `1e-06` | > 0 | Peak learning rate"));
  EXPECT_THAT(doc,
              HasSubstr("| `buffer.sampling` | string | `\"fifo\"` | one of: fifo, freshest |"));
  EXPECT_THAT(doc, HasSubstr("## `buffer.server`"));
  EXPECT_THAT(doc, HasSubstr("## `rewards.functions[]`"));
}

}  // namespace
}  // namespace flywheel::core
